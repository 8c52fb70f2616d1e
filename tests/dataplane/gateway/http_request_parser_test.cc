// The gateway's request parser on partial, pipelined, chunked and malformed input.
#include "shoal/dataplane/gateway/http_request_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shoal {
namespace {

// Records what the parser reports; `take_body` decides OnHead's answer.
class Recorder : public RequestEvents {
 public:
  void OnBegin() override { ++begins; }
  bool OnHead(const RequestHead& head) override {
    heads.push_back(head);
    return take_body;
  }
  bool OnBodyPiece(const char* at, size_t len) override {
    body.append(at, len);
    ++pieces;
    return body.size() <= body_limit;
  }

  bool take_body = false;
  size_t body_limit = SIZE_MAX;
  int begins = 0;
  int pieces = 0;
  std::vector<RequestHead> heads;
  std::string body;
};

using Outcome = HttpRequestParser::Step::Outcome;

TEST(HttpRequestParser, ByteByByteGivesOneMessageOnItsLastByte) {
  const std::string req =
      "POST /fn/echo/sub?x=1 HTTP/1.1\r\nHost: a\r\ncontent-TYPE: text/plain\r\n"
      "Authorization: Bearer abc\r\nInference-Header-Content-Length: 17\r\n"
      "Content-Encoding: GZip\r\nContent-Length: 5\r\n\r\nhello";
  Recorder rec;
  HttpRequestParser parser(rec);
  for (size_t i = 0; i < req.size(); ++i) {
    const auto step = parser.Execute(req.data() + i, 1);
    ASSERT_EQ(step.consumed, 1u) << "byte " << i;
    ASSERT_EQ(step.outcome, i + 1 == req.size() ? Outcome::kMessage : Outcome::kNeedMore)
        << "byte " << i;
  }
  EXPECT_EQ(rec.begins, 1);
  ASSERT_EQ(rec.heads.size(), 1u);
  const RequestHead& h = rec.heads[0];
  EXPECT_EQ(h.method_name(), "POST");
  EXPECT_EQ(h.url, "/fn/echo/sub?x=1");
  EXPECT_EQ(h.content_type, "text/plain");
  EXPECT_EQ(h.authorization, "Bearer abc");
  EXPECT_EQ(h.inference_header_length, "17");
  EXPECT_EQ(h.content_encoding, "gzip");  // lower case: the inference handler compares it
  EXPECT_EQ(h.content_length, 5u);
  EXPECT_FALSE(h.chunked);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_FALSE(h.expect_continue);
  EXPECT_GT(h.start_ns, 0u);
  EXPECT_EQ(rec.body, "hello");
  EXPECT_EQ(parser.head().url, "/fn/echo/sub?x=1");  // kept until the next message begins
}

TEST(HttpRequestParser, PipelinedRequestsComeOneAtATime) {
  const std::string first = "GET /a HTTP/1.1\r\nHost: x\r\nContent-Encoding: deflate\r\n\r\n";
  const std::string second = "GET /b?q HTTP/1.1\r\nConnection: close\r\n\r\n";
  const std::string both = first + second;
  Recorder rec;
  HttpRequestParser parser(rec);
  auto step = parser.Execute(both.data(), both.size());
  EXPECT_EQ(step.outcome, Outcome::kMessage);
  EXPECT_EQ(step.consumed, first.size());
  ASSERT_EQ(rec.heads.size(), 1u);
  EXPECT_EQ(rec.heads[0].url, "/a");
  EXPECT_TRUE(rec.heads[0].keep_alive);

  step = parser.Execute(both.data() + first.size(), second.size());
  EXPECT_EQ(step.outcome, Outcome::kMessage);
  EXPECT_EQ(step.consumed, second.size());
  ASSERT_EQ(rec.heads.size(), 2u);
  EXPECT_EQ(rec.heads[1].url, "/b?q");
  EXPECT_EQ(rec.heads[0].content_encoding, "deflate");
  EXPECT_EQ(rec.heads[1].content_encoding, "");  // each message's own headers
  EXPECT_FALSE(rec.heads[1].keep_alive);
  EXPECT_EQ(rec.begins, 2);
}

TEST(HttpRequestParser, TakenBodyEndsTheMessageAtTheHead) {
  const std::string head =
      "PUT /fn/f HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n";
  const std::string req = head + "abcd";
  Recorder rec;
  rec.take_body = true;
  HttpRequestParser parser(rec);
  const auto step = parser.Execute(req.data(), req.size());
  EXPECT_EQ(step.outcome, Outcome::kMessage);
  EXPECT_EQ(step.consumed, head.size());  // the body is the caller's to read
  EXPECT_EQ(rec.pieces, 0);
  ASSERT_EQ(rec.heads.size(), 1u);
  EXPECT_TRUE(rec.heads[0].expect_continue);
  EXPECT_EQ(rec.heads[0].content_length, 4u);
}

TEST(HttpRequestParser, ChunkedBodyComesInPieces) {
  const std::string req =
      "POST /fn/f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  Recorder rec;
  HttpRequestParser parser(rec);
  const auto step = parser.Execute(req.data(), req.size());
  EXPECT_EQ(step.outcome, Outcome::kMessage);
  EXPECT_EQ(step.consumed, req.size());
  ASSERT_EQ(rec.heads.size(), 1u);
  EXPECT_TRUE(rec.heads[0].chunked);
  EXPECT_EQ(rec.heads[0].content_length, 0u);
  EXPECT_TRUE(rec.heads[0].has_body());
  EXPECT_EQ(rec.body, "hello world");
  EXPECT_EQ(rec.pieces, 2);
}

TEST(HttpRequestParser, RefusedBodyPieceEndsTheMessageEarly) {
  const std::string req = "POST /fn/f HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789";
  Recorder rec;
  rec.body_limit = 3;
  HttpRequestParser parser(rec);
  // Two pieces: the second goes over the limit and ends the message.
  auto step = parser.Execute(req.data(), req.size() - 8);
  EXPECT_EQ(step.outcome, Outcome::kNeedMore);
  EXPECT_EQ(rec.body, "01");
  step = parser.Execute(req.data() + (req.size() - 8), 8);
  EXPECT_EQ(step.outcome, Outcome::kMessage);
  EXPECT_EQ(rec.body, "0123456789");
}

// `req` is refused with HTTP `status` and the parser's `reason`, before any head is delivered.
void ExpectRefused(const std::string& req, int status, const char* reason) {
  Recorder rec;
  HttpRequestParser parser(rec);
  const auto step = parser.Execute(req.data(), req.size());
  EXPECT_EQ(step.outcome, Outcome::kError);
  EXPECT_EQ(step.error_status, status);
  EXPECT_STREQ(step.error, reason);
  EXPECT_TRUE(rec.heads.empty());
}

TEST(HttpRequestParser, MalformedRequestLineIs400WithTheParsersReason) {
  ExpectRefused("BREW /pot HTTP/1.1\r\n\r\n", 400, "invalid HTTP method");
}

TEST(HttpRequestParser, HeadOverTheParsersLimitIs431) {
  std::string req = "GET / HTTP/1.1\r\nX-Big: ";
  req.append(200 * 1024, 'a');
  req += "\r\n\r\n";
  ExpectRefused(req, 431, http_errno_description(HPE_HEADER_OVERFLOW));
}

TEST(HttpRequestParser, UrlOverTheLimitIs400) {
  std::string req = "GET /";
  req.append(HttpRequestParser::kMaxUrlBytes, 'u');
  req += " HTTP/1.1\r\n\r\n";
  ExpectRefused(req, 400, http_errno_description(HPE_CB_url));
}

TEST(HttpRequestParser, HeaderValuesAreBoundedAndHttp10ClosesByDefault) {
  std::string req = "GET / HTTP/1.0\r\nContent-Type: ";
  req.append(300, 't');
  req += "\r\n\r\n";
  Recorder rec;
  HttpRequestParser parser(rec);
  const auto step = parser.Execute(req.data(), req.size());
  EXPECT_EQ(step.outcome, Outcome::kMessage);
  ASSERT_EQ(rec.heads.size(), 1u);
  EXPECT_EQ(rec.heads[0].content_type, std::string(255, 't'));
  EXPECT_FALSE(rec.heads[0].keep_alive);
  EXPECT_FALSE(rec.heads[0].has_body());
}

}  // namespace
}  // namespace shoal
