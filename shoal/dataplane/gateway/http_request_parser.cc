#include "shoal/dataplane/gateway/http_request_parser.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <climits>

#include "shoal/common/clock.h"

namespace shoal {

const http_parser_settings HttpRequestParser::kSettings = [] {
  http_parser_settings s{};
  s.on_message_begin = &HttpRequestParser::OnMessageBegin;
  s.on_url = &HttpRequestParser::OnUrl;
  s.on_header_field = &HttpRequestParser::OnHeaderField;
  s.on_header_value = &HttpRequestParser::OnHeaderValue;
  s.on_headers_complete = &HttpRequestParser::OnHeadersComplete;
  s.on_body = &HttpRequestParser::OnBody;
  s.on_message_complete = &HttpRequestParser::OnMessageComplete;
  return s;
}();

HttpRequestParser::HttpRequestParser(RequestEvents& events) : events_(events) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

HttpRequestParser::Step HttpRequestParser::Execute(const char* data, size_t len) {
  Step step;
  step.consumed = http_parser_execute(&parser_, &kSettings, data, len);
  const auto err = HTTP_PARSER_ERRNO(&parser_);
  if (err == HPE_PAUSED) {
    http_parser_pause(&parser_, 0);
  } else if (err != HPE_OK) {
    step.outcome = Step::Outcome::kError;
    step.error_status = err == HPE_HEADER_OVERFLOW ? 431 : 400;
    step.error = http_errno_description(err);
    return step;
  }
  if (message_done_) {
    message_done_ = false;
    step.outcome = Step::Outcome::kMessage;
  }
  return step;
}

int HttpRequestParser::OnMessageBegin(http_parser* p) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  RequestHead& h = self->head_;
  h.start_ns = MonotonicNs();
  h.url.clear();
  h.content_type.clear();
  h.authorization.clear();
  h.inference_header_length.clear();
  h.content_encoding.clear();
  h.forwarded_by.clear();
  h.service = {};
  h.expect_continue = false;
  h.keep_alive = true;
  h.chunked = false;
  h.content_length = 0;
  self->header_field_.clear();
  self->header_value_.clear();
  self->header_in_value_ = false;
  self->events_.OnBegin();
  return 0;
}

int HttpRequestParser::OnUrl(http_parser* p, const char* at, size_t len) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (self->head_.url.size() + len > kMaxUrlBytes) return 1;
  self->head_.url.append(at, len);
  return 0;
}

void HttpRequestParser::FinishHeader() {
  if (header_field_.empty()) return;
  if (strcasecmp(header_field_.c_str(), "content-type") == 0) {
    head_.content_type = header_value_.substr(0, 255);
  } else if (strcasecmp(header_field_.c_str(), "authorization") == 0) {
    head_.authorization = header_value_;
  } else if (strcasecmp(header_field_.c_str(), "inference-header-content-length") == 0) {
    head_.inference_header_length = header_value_.substr(0, 20);
  } else if (strcasecmp(header_field_.c_str(), "content-encoding") == 0) {
    head_.content_encoding = header_value_.substr(0, 32);
    for (char& c : head_.content_encoding) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  } else if (strcasecmp(header_field_.c_str(), "x-shoal-forwarded-by") == 0) {
    head_.forwarded_by = header_value_.substr(0, 64);
  } else if (strncasecmp(header_field_.c_str(), "flwr-", 5) == 0) {
    const std::string value = header_value_.substr(0, ServiceHeaders::kMaxServiceHeaderBytes);
    if (strcasecmp(header_field_.c_str(), "flwr-public-key") == 0) {
      head_.service.flwr_public_key = value;
    } else if (strcasecmp(header_field_.c_str(), "flwr-signature") == 0) {
      head_.service.flwr_signature = value;
    } else if (strcasecmp(header_field_.c_str(), "flwr-timestamp") == 0) {
      head_.service.flwr_timestamp = value;
    }
  } else if (strcasecmp(header_field_.c_str(), "expect") == 0 &&
             strcasecmp(header_value_.c_str(), "100-continue") == 0) {
    head_.expect_continue = true;
  }
  header_field_.clear();
  header_value_.clear();
}

int HttpRequestParser::OnHeaderField(http_parser* p, const char* at, size_t len) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (self->header_in_value_) {
    self->FinishHeader();
    self->header_in_value_ = false;
  }
  if (self->header_field_.size() < 256) {
    self->header_field_.append(at, std::min<size_t>(len, 256));
  }
  return 0;
}

int HttpRequestParser::OnHeaderValue(http_parser* p, const char* at, size_t len) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  self->header_in_value_ = true;
  if (self->header_value_.size() < 1024) {
    self->header_value_.append(at, std::min<size_t>(len, 1024));
  }
  return 0;
}

int HttpRequestParser::OnHeadersComplete(http_parser* p) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  self->FinishHeader();
  RequestHead& h = self->head_;
  h.method = static_cast<int>(p->method);
  h.keep_alive = http_should_keep_alive(p) != 0;
  h.chunked = (p->flags & F_CHUNKED) != 0;
  h.content_length = (p->content_length == ULLONG_MAX || h.chunked) ? 0 : p->content_length;
  return self->events_.OnHead(h) ? 1 : 0;
}

int HttpRequestParser::OnBody(http_parser* p, const char* at, size_t len) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (!self->events_.OnBodyPiece(at, len)) {
    self->message_done_ = true;
    http_parser_pause(p, 1);
  }
  return 0;
}

int HttpRequestParser::OnMessageComplete(http_parser* p) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  self->message_done_ = true;
  http_parser_pause(p, 1);  // one request at a time; the rest waits in the caller's buffer
  return 0;
}

}  // namespace shoal
