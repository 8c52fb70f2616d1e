// The request side of one HTTP/1.1 connection: http_parser underneath, the few headers the
// gateway acts on kept (bounded), one message at a time. Where the body goes is the caller's
// choice (RequestEvents::OnHead): a Content-Length body may be taken out of the parser's hands
// and read straight into a pool buffer; other bodies come piece by piece.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shoal/interfaces/http_reply.h"

namespace shoal {

// What the gateway reads of a request's head. Strings keep their capacity across requests.
struct RequestHead {
  uint64_t start_ns = 0;                // CLOCK_MONOTONIC when the message began
  int method = 0;                       // http_method
  std::string url;                      // at most kMaxUrlBytes
  std::string content_type;             // at most 255 bytes
  std::string authorization;            // the Authorization header's value
  std::string inference_header_length;  // OIP binary extension: Inference-Header-Content-Length
  std::string content_encoding;         // Content-Encoding (lower case, at most 32 bytes)
  std::string forwarded_by;  // X-Shoal-Forwarded-By: the node that forwarded it (cluster mode)
  ServiceHeaders service;    // what the control-thread services read (the Fleet API's signature)
  bool expect_continue = false;
  bool keep_alive = true;
  bool chunked = false;
  uint64_t content_length = 0;  // 0 when chunked or absent

  std::string_view method_name() const { return http_method_str(static_cast<http_method>(method)); }
  bool has_body() const { return chunked || content_length > 0; }
};

class RequestEvents {
 public:
  virtual ~RequestEvents() = default;
  // A new message begins (the head is cleared already).
  virtual void OnBegin() = 0;
  // The head is complete. True takes the body out of the parser's hands: the message ends
  // here and the caller reads `content_length` bytes itself.
  virtual bool OnHead(const RequestHead& head) = 0;
  // A piece of a body the parser reads. False ends the message here (the caller has decided
  // the answer, e.g. 413).
  virtual bool OnBodyPiece(const char* at, size_t len) = 0;
};

class HttpRequestParser {
 public:
  static constexpr size_t kMaxUrlBytes = 8192;

  explicit HttpRequestParser(RequestEvents& events);
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  struct Step {
    enum class Outcome { kNeedMore, kMessage, kError } outcome = Outcome::kNeedMore;
    size_t consumed = 0;     // bytes of the input parsed (a pipelined next request starts there)
    int error_status = 0;    // kError: 431 for a head over the limit, 400 otherwise
    const char* error = "";  // kError: http_parser's description
  };
  // Parses `data` until one message ends (kMessage), the input runs out (kNeedMore) or turns
  // out malformed (kError: the connection cannot continue).
  Step Execute(const char* data, size_t len);

  const RequestHead& head() const { return head_; }

 private:
  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t len);
  static int OnHeaderField(http_parser* p, const char* at, size_t len);
  static int OnHeaderValue(http_parser* p, const char* at, size_t len);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t len);
  static int OnMessageComplete(http_parser* p);
  static const http_parser_settings kSettings;

  void FinishHeader();

  RequestEvents& events_;
  http_parser parser_{};
  RequestHead head_;
  std::string header_field_, header_value_;
  bool header_in_value_ = false;
  bool message_done_ = false;
};

}  // namespace shoal
