/* An example user handler built as a shared library: answers with the body reversed.
 * Deploy it with spec.handler.library pointing at the built libshoal-reverse.so. */
#include <string.h>

#include "shoal/runtime/instance/handler_abi.h"

int shoal_handle(const shoal_request* req, shoal_response* resp) {
  if (req->body_len == 0) {
    resp->set_error(resp->ctx, 400, "reverse: empty body");
    return 0;
  }
  uint8_t* out = resp->alloc(resp->ctx, req->body_len, "application/octet-stream");
  if (out == NULL) return 1;
  for (size_t i = 0; i < req->body_len; ++i) out[i] = req->body[req->body_len - 1 - i];
  return 0;
}

/* Reversing only computes: run inline on the instance's event loop. */
int shoal_may_block(void) { return 0; }
