// A small blocking HTTP client (libcurl) for the CLI: one request at a time against shoald.
// Transport failures (refused, unresolvable, timed out) come back as kUnavailable-style
// errors so the caller can tell "cannot reach shoald" from an HTTP error status.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::cli {

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;  // empty when the request streamed its body to a sink
};

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // appended to the base URL, e.g. "/v1/functions"
  std::string body;
  FILE* upload = nullptr;     // streams the request body from here instead of `body`
  int64_t upload_size = -1;   // bytes in `upload`; -1 = unknown (chunked)
  std::vector<std::string> headers;  // "Name: value"
  // When set, response bytes go here as they arrive instead of into HttpResponse::body. The
  // status is known by then (the headers came first).
  std::function<void(long status, std::string_view bytes)> sink;
  // When set, called as the response body arrives (libcurl's transfer-progress callback, at
  // least once a second): bytes so far and the total, -1 while it is unknown.
  std::function<void(int64_t received, int64_t total)> progress;
};

class HttpClient {
 public:
  // Every request carries `Authorization: Bearer <token>` when `token` is set; `ca` is a PEM
  // file of the authority to trust for https:// (else the system's).
  explicit HttpClient(std::string base_url, std::string token = {}, std::string ca = {});
  const std::string& base_url() const { return base_url_; }
  // Returns the response, or nullopt with `*error` set when no HTTP response came back.
  std::optional<HttpResponse> Send(const HttpRequest& request, std::string* error) const;

 private:
  std::string base_url_;
  std::string authorization_;  // "Authorization: Bearer ..." or ""
  std::string ca_;
};

}  // namespace shoal::cli
