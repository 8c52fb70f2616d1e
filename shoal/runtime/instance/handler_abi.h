/* The C ABI for user handlers built as a shared library. A manifest names the file
 * (spec.handler.library) and the entry point (spec.handler.symbol, default "shoal_handle").
 * The request body is read in place from shared memory; the response is written straight
 * into a shared-memory buffer that `alloc` returns, so no byte is copied by the runtime. */
#ifndef SHOAL_RUNTIME_HANDLER_ABI_H_
#define SHOAL_RUNTIME_HANDLER_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHOAL_HANDLER_ABI_VERSION 1

typedef struct shoal_request {
  const char* method; /* "GET", "POST", ... (NUL-terminated) */
  const char* path;   /* the part after /fn/<name>, may be empty; not NUL-terminated */
  size_t path_len;
  const char* query; /* without the '?'; not NUL-terminated */
  size_t query_len;
  const char* content_type;
  size_t content_type_len;
  const uint8_t* body;
  size_t body_len;
} shoal_request;

typedef struct shoal_response {
  void* ctx;
  /* Returns room for `body_len` bytes of response body in shared memory, or NULL when the
   * pool is full (the runtime then answers 503). Call at most once. */
  uint8_t* (*alloc)(void* ctx, size_t body_len, const char* content_type);
  /* HTTP status of the response (default 200). */
  void (*set_status)(void* ctx, int status);
  /* Answers with an error: {"error": message} and this status. */
  void (*set_error)(void* ctx, int status, const char* message);
} shoal_response;

/* The entry point: return 0 when the response is set, non-zero for a failure (HTTP 500). */
typedef int (*shoal_handle_fn)(const shoal_request* request, shoal_response* response);

/* Optional: called once when the instance starts; non-zero fails the instance start. */
typedef int (*shoal_init_fn)(void);

/* Optional "shoal_may_block": return 0 when the handler only computes (never sleeps or waits
 * on I/O); the instance then runs it inline on its event loop instead of on worker threads. */
typedef int (*shoal_may_block_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_RUNTIME_HANDLER_ABI_H_ */
