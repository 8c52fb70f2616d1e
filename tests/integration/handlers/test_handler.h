/* What the test handlers (probe_handler.c, attack_handler.c) share: each reads its request body
 * as one command and answers with text. Static inline: each handler is its own .so. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shoal/runtime/instance/handler_abi.h"

/* The body as a NUL-terminated command in cmd[cap], cut at cap - 1 bytes, trailing newlines and
 * spaces dropped; returns its length. */
static inline size_t read_command(const shoal_request* req, char* cmd, size_t cap) {
  size_t n = req->body_len < cap - 1 ? req->body_len : cap - 1;
  memcpy(cmd, req->body, n);
  cmd[n] = 0;
  while (n > 0 && (cmd[n - 1] == '\n' || cmd[n - 1] == ' ')) cmd[--n] = 0;
  return n;
}

/* Answers len bytes of text as text/plain: 0, or 1 when the response could not be allocated. */
static inline int reply_bytes(shoal_response* resp, const char* text, size_t len) {
  uint8_t* out = resp->alloc(resp->ctx, len, "text/plain");
  if (out == NULL) return 1;
  memcpy(out, text, len);
  return 0;
}

/* Answers a NUL-terminated text. */
static inline int reply(shoal_response* resp, const char* text) {
  return reply_bytes(resp, text, strlen(text));
}
