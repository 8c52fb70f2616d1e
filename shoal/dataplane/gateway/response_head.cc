#include "shoal/dataplane/gateway/response_head.h"

#include <charconv>

#include "shoal/common/json_escape.h"

namespace shoal {

const char* HttpReason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

namespace {

template <class Int>
void AppendNumber(std::string& out, Int v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

ResponseHead::ResponseHead(std::string& out, int status, std::string_view content_type,
                           uint64_t content_length)
    : out_(out) {
  out_.clear();
  out_ += "HTTP/1.1 ";
  AppendNumber(out_, status);
  out_ += ' ';
  out_ += HttpReason(status);
  out_ += "\r\nContent-Type: ";
  out_ += content_type;
  if (content_length == kChunked) {
    out_ += "\r\nTransfer-Encoding: chunked";
  } else {
    out_ += "\r\nContent-Length: ";
    AppendNumber(out_, content_length);
  }
}

ResponseHead& ResponseHead::Header(std::string_view name, std::string_view value) {
  out_ += "\r\n";
  out_ += name;
  out_ += ": ";
  out_ += value;
  return *this;
}

void ResponseHead::Finish(bool keep_alive) {
  out_ += keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
}

std::string JsonError(std::string_view message) {
  std::string out = "{\"error\":\"";
  AppendJsonEscaped(out, message);  // messages may quote a request's bytes: valid UTF-8 only
  out += "\"}\n";
  return out;
}

SplitContentType SplitInferenceHeaderLength(std::string_view content_type) {
  static constexpr std::string_view kInferHeader = "; inference-header-content-length=";
  SplitContentType out{content_type, {}};
  if (const auto p = content_type.find(kInferHeader); p != std::string_view::npos) {
    out.inference_header_length = content_type.substr(p + kInferHeader.size());
    out.type = content_type.substr(0, p);
  }
  return out;
}

}  // namespace shoal
