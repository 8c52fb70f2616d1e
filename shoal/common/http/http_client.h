// Shoal's one HTTP client (libcurl), used by the `shoal` CLI, the FL client SDK, the OIP
// classifier, the cluster views and the etcd client (its unary calls and its streamed watches):
// one blocking request at a time over a connection kept alive between requests.
// Transport failures (refused, unresolvable, timed out) come back as no response with an error
// text, so a caller can tell "cannot reach the server" from an HTTP error status.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::client {

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // empty when the request streamed its body to a sink
};

struct HttpRequest {
  std::string method = "GET";
  std::string path;                  // appended to the base URL, e.g. "/v1/functions"
  std::string_view body;             // not copied: it must outlive Send
  FILE* upload = nullptr;            // streams the request body from here instead of `body`
  int64_t upload_size = -1;          // bytes in `upload`; -1 = unknown (chunked)
  std::vector<std::string> headers;  // "Name: value"; a body without Content-Type is labelled
                                     // application/octet-stream
  long timeout_ms = 0;               // the whole request; 0: no limit
  long connect_timeout_ms = 0;       // the connection; 0: 5 s
  // TCP keepalive probes on the connection (idle 4 s, then every 2 s): a long stream whose peer
  // vanished without closing it (a partitioned server) fails within ~10 s instead of never.
  bool keepalive_probes = false;
  // When set, response bytes go here as they arrive instead of into HttpResponse::body. The
  // status is known by then (the headers came first).
  std::function<void(long status, std::string_view bytes)> sink;
  // When set, called as the response body arrives (libcurl's transfer-progress callback, at
  // least once a second): bytes so far and the total, -1 while it is unknown.
  std::function<void(int64_t received, int64_t total)> progress;
  // When set, the request stops (no response, the error "cancelled") within 100 ms of it turning
  // true: a long watch ends when its owner stops.
  const std::atomic<bool>* cancel = nullptr;
};

class HttpClient {
 public:
  // Every request carries `Authorization: Bearer <token>` when `token` is set; `ca` is a PEM
  // file of the authority to trust for https:// (else the system's).
  explicit HttpClient(std::string base_url, std::string token = {}, std::string ca = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const std::string& base_url() const { return base_url_; }
  // Returns the response, or nullopt with `*error` set when no HTTP response came back. Not
  // for two threads at once (the connection is one).
  std::optional<HttpResponse> Send(const HttpRequest& request, std::string* error) const;
  // `s` escaped for a URL's path or query.
  std::string Escape(std::string_view s) const;

 private:
  struct Connection;
  std::string base_url_;
  std::string authorization_;  // "Authorization: Bearer ..." or ""
  std::string ca_;
  std::unique_ptr<Connection> connection_;
};

}  // namespace shoal::client
