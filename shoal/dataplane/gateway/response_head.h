// Response heads, written one way for every answer the gateway sends: a function's (body in
// the pool), a control reply's and an error's. The head goes out beside the body in one
// writev, so the body is never copied to join it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shoal {

// "HTTP/1.1 <code> <reason>" reason phrases.
const char* HttpReason(int status);

// Builds "HTTP/1.1 <status> <reason>\r\nContent-Type: ..\r\nContent-Length: ..[\r\n<extra>]"
// and its end into `out` (cleared first; its capacity is reused across responses).
class ResponseHead {
 public:
  // As content_length: the body follows in chunks (Transfer-Encoding: chunked).
  static constexpr uint64_t kChunked = ~uint64_t{0};
  ResponseHead(std::string& out, int status, std::string_view content_type,
               uint64_t content_length);
  ResponseHead& Header(std::string_view name, std::string_view value);
  // Ends the head; "Connection: close" unless the connection stays open.
  void Finish(bool keep_alive);

 private:
  std::string& out_;
};

// {"error":"<message>"} with quotes and backslashes escaped and control bytes as spaces.
std::string JsonError(std::string_view message);

// A handler's content type with the OIP binary extension's header length split off:
// "application/octet-stream; inference-header-content-length=42" -> type, "42".
struct SplitContentType {
  std::string_view type;
  std::string_view inference_header_length;  // "" when absent
};
SplitContentType SplitInferenceHeaderLength(std::string_view content_type);

}  // namespace shoal
