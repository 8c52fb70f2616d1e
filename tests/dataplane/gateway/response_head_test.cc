// Response heads: the exact bytes every answer of the gateway starts with.
#include "shoal/dataplane/gateway/response_head.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace shoal {
namespace {

TEST(ResponseHead, KeepAliveHead) {
  std::string out = "left over from the previous response";
  ResponseHead(out, 200, "text/plain", 3).Finish(true);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n");
}

TEST(ResponseHead, HeadersInOrderAndClose) {
  std::string out;
  ResponseHead(out, 503, "application/json", 1234567890123ull)
      .Header("Retry-After", "1")
      .Header("WWW-Authenticate", "Bearer realm=\"shoal\"")
      .Finish(false);
  EXPECT_EQ(out,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Content-Length: 1234567890123\r\nRetry-After: 1\r\n"
            "WWW-Authenticate: Bearer realm=\"shoal\"\r\nConnection: close\r\n\r\n");
}

// A streamed answer (Server-Sent Events): the body follows in chunks, no length.
TEST(ResponseHead, ChunkedHead) {
  std::string out;
  ResponseHead(out, 200, "text/event-stream", ResponseHead::kChunked)
      .Header("Cache-Control", "no-cache")
      .Finish(true);
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            "Cache-Control: no-cache\r\n\r\n");
}

TEST(ResponseHead, ReasonPhrases) {
  const std::pair<int, const char*> kReasons[] = {
      {431, "Request Header Fields Too Large"},
      {401, "Unauthorized"},
      {411, "Length Required"},
      {429, "Too Many Requests"},
      {504, "Gateway Timeout"},
      {299, "OK"},
      {418, "Client Error"},
      {599, "Server Error"},
  };
  for (const auto& [code, reason] : kReasons) EXPECT_STREQ(HttpReason(code), reason) << code;
  std::string out;
  ResponseHead(out, 418, "x", 0).Finish(true);
  EXPECT_EQ(out, "HTTP/1.1 418 Client Error\r\nContent-Type: x\r\nContent-Length: 0\r\n\r\n");
}

TEST(ResponseHead, InferenceHeaderLengthIsSplitOffTheContentType) {
  auto s =
      SplitInferenceHeaderLength("application/octet-stream; inference-header-content-length=42");
  EXPECT_EQ(s.type, "application/octet-stream");
  EXPECT_EQ(s.inference_header_length, "42");
  s = SplitInferenceHeaderLength("application/json");
  EXPECT_EQ(s.type, "application/json");
  EXPECT_EQ(s.inference_header_length, "");
}

TEST(ResponseHead, JsonErrorEscapes) {
  EXPECT_EQ(JsonError("bad \"x\" \\ y\nz"), "{\"error\":\"bad \\\"x\\\" \\\\ y z\"}\n");
}

}  // namespace
}  // namespace shoal
