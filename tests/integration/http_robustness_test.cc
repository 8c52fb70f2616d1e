// The gateway's HTTP/1.1 front door against hostile and broken clients: a real shoald with an
// echo function, raw sockets, exact bytes. Whatever a client sends, it gets the documented
// status and {"error": ...} body or a closed connection, every pool buffer comes back, and the
// daemon goes on serving (every test ends by checking /healthz, an echo byte for byte and the
// pool's used bytes).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/loopback.h"
#include "tests/support/shoald_fixture.h"

namespace shoal::testing {
namespace {

using Clock = std::chrono::steady_clock;

// One raw TCP connection: send exact bytes, read exact bytes.
class RawConn {
 public:
  explicit RawConn(uint16_t port) : fd_(ConnectLoopback(port)) {}
  ~RawConn() {
    if (fd_ >= 0) close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return fd_ >= 0; }
  // False when the peer has closed (or reset) the connection.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  // Abortive close: RST instead of FIN, as a crashed client would leave it.
  void Reset() {
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd_);
    fd_ = -1;
  }

  // Reads until the peer closes or `timeout_ms` passes; `closed` says which.
  std::string ReadAll(int timeout_ms, bool* closed = nullptr) {
    std::string out;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    bool eof = false;
    while (!eof) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        eof = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    if (closed != nullptr) *closed = eof;
    return out;
  }

  // Reads one whole response (head + Content-Length body); empty when none arrives in time.
  std::string ReadResponse(int timeout_ms = 10000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const size_t head_end = pending_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t length = 0;
        const std::string head = pending_.substr(0, head_end);
        const size_t cl = head.find("\r\nContent-Length: ");
        if (cl != std::string::npos) length = std::stoul(head.substr(cl + 18));
        if (pending_.size() >= head_end + 4 + length) {
          std::string one = pending_.substr(0, head_end + 4 + length);
          pending_.erase(0, one.size());
          return one;
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return {};
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return {};
      pending_.append(buf, static_cast<size_t>(n));
    }
  }
  // True when the peer closes the connection within `timeout_ms` with nothing more to read.
  bool ClosedByPeer(int timeout_ms = 5000) {
    bool closed = false;
    const std::string rest = ReadAll(timeout_ms, &closed);
    return closed && rest.empty() && pending_.empty();
  }

 private:
  int fd_ = -1;
  std::string pending_;
};

std::string RandomBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// The exact response the gateway writes for an error.
std::string ErrorResponse(int status, const std::string& reason, const std::string& message,
                          bool close) {
  const std::string body = "{\"error\":\"" + message + "\"}\n";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         (close ? "\r\nConnection: close" : "") + "\r\n\r\n" + body;
}
std::string Malformed(const std::string& what) {
  return ErrorResponse(400, "Bad Request", "malformed HTTP request: " + what, true);
}
std::string EchoResponse(const std::string& body, const std::string& content_type, bool close) {
  return "HTTP/1.1 200 OK\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) +
         (close ? "\r\nConnection: close" : "") + "\r\n\r\n" + body;
}
std::string EchoRequest(const std::string& body, const std::string& extra_headers = {}) {
  return "POST /fn/echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/x-echo\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

class HttpRobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(shoald_.Start()) << shoald_.Log();
    const CliResult d = shoald_.Deploy(
        "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\nspec:\n"
        "  handler:\n    builtin: echo\n  concurrency: 8\n  scale: {min: 1, max: 1}\n"
        "  maxBodySize: 4Mi\n");
    ASSERT_EQ(d.exit_code, 0) << d.err;
    ASSERT_TRUE(shoald_.WaitReady("echo", 1));
  }

  void TearDown() override {
    // Whatever the test threw at it, the daemon still serves, byte for byte.
    const HttpResult h = Http(shoald_.port(), "GET", "/healthz");
    EXPECT_EQ(h.status, 200) << h.error;
    EXPECT_EQ(h.body, "ok\n");
    const std::string body = RandomBytes(100000, 99);
    const HttpResult e = Http(shoald_.port(), "POST", "/fn/echo", body, {"Content-Type: a/b"});
    EXPECT_EQ(e.status, 200) << e.error;
    EXPECT_TRUE(e.body == body) << "echo bytes differ after the test";
    EXPECT_TRUE(PoolDrains()) << "pool bytes in use: " << PoolUsed();
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }

  double PoolUsed() { return shoald_.Metric("shoal_pool_bytes", "state=\"used\""); }
  // Every request buffer returns to the pool (the gateway frees them as connections close).
  bool PoolDrains(int timeout_ms = 5000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      if (PoolUsed() == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `request` on a fresh connection and returns everything until the daemon closes it.
  std::string OneShot(const std::string& request, bool* closed = nullptr) {
    RawConn c(shoald_.port());
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE(c.Send(request));
    return c.ReadAll(10000, closed);
  }

  Shoald shoald_;
};

TEST_F(HttpRobustnessTest, MalformedRequestLinesGet400AndTheConnectionCloses) {
  struct Case {
    std::string request;
    std::string error;  // http_parser's description
  };
  const std::vector<Case> cases = {
      {"GARBAGE\r\n\r\n", "invalid HTTP method"},
      {"FOO /fn/echo HTTP/1.1\r\n\r\n", "invalid HTTP method"},
      {"GET /fn/echo HTTP/1.1 trailing\r\n\r\n", "invalid HTTP version"},
      {"GET /fn/echo HTP/1.1\r\n\r\n", "invalid HTTP version"},
      {"GET /fn/echo HTTP/1.x\r\n\r\n", "invalid HTTP version"},
      {"GET  HTTP/1.1\r\n\r\n", "invalid URL"},
      {"GET /fn/e\x01ho HTTP/1.1\r\n\r\n", "invalid URL"},
      {"GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n", "invalid character in header"},
      {"GET /healthz HTTP/1.1\r\nBad(name): 1\r\n\r\n", "invalid character in header"},
      {std::string("\0\0\0\0\r\n\r\n", 8), "invalid HTTP method"},
  };
  for (const Case& c : cases) {
    bool closed = false;
    const std::string got = OneShot(c.request, &closed);
    EXPECT_EQ(got, Malformed(c.error)) << "request: " << ::testing::PrintToString(c.request);
    EXPECT_TRUE(closed) << ::testing::PrintToString(c.request);
  }
  // An 8 KiB+ URL is refused by the gateway's own limit.
  bool closed = false;
  const std::string got =
      OneShot("GET /fn/echo/" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n", &closed);
  EXPECT_EQ(got, Malformed("the on_url callback failed"));
  EXPECT_TRUE(closed);
}

TEST_F(HttpRobustnessTest, HeadersOver80KiBGet431) {
  // One huge header, and many ordinary ones adding up to more than 80 KiB.
  const std::string one_big =
      "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(90 * 1024, 'x') + "\r\n\r\n";
  std::string many = "POST /fn/echo HTTP/1.1\r\nContent-Length: 3\r\n";
  for (int i = 0; i < 1000; ++i) {
    many += "X-H" + std::to_string(i) + ": " + std::string(90, 'v') + "\r\n";
  }
  many += "\r\nabc";
  for (const std::string& req : {one_big, many}) {
    bool closed = false;
    const std::string got = OneShot(req, &closed);
    EXPECT_EQ(got,
              ErrorResponse(431, "Request Header Fields Too Large",
                            "malformed HTTP request: too many header bytes seen; overflow detected",
                            true));
    EXPECT_TRUE(closed);
  }
  // Headers larger than the 64 KiB read buffer but under the limit are fine.
  RawConn c(shoald_.port());
  ASSERT_TRUE(c.Send(EchoRequest("fits", "X-Pad: " + std::string(70 * 1024, 'p') + "\r\n")));
  EXPECT_EQ(c.ReadResponse(), EchoResponse("fits", "text/x-echo", false));
}

TEST_F(HttpRobustnessTest, BadChunkedEncodingGets400AndFreesTheBuffer) {
  const std::string head = "POST /fn/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  struct Case {
    std::string body;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"zz\r\nabc\r\n0\r\n\r\n", "invalid character in chunk size header"},
      {"3\r\nabc\r\nq\r\n", "invalid character in chunk size header"},
      {"ffffffffffffffffff\r\nabc", "invalid character in content-length header"},
      {"-1\r\nabc\r\n", "invalid character in chunk size header"},
  };
  for (const Case& c : cases) {
    bool closed = false;
    const std::string got = OneShot(head + c.body, &closed);
    EXPECT_EQ(got, Malformed(c.error)) << ::testing::PrintToString(c.body);
    EXPECT_TRUE(closed);
  }
  // A chunked body over the function's 4 MiB limit: 413 and the connection closes.
  RawConn c(shoald_.port());
  ASSERT_TRUE(c.Send(head));
  const std::string chunk = "100000\r\n" + std::string(1 << 20, 'c') + "\r\n";
  for (int i = 0; i < 5; ++i) {
    if (!c.Send(chunk)) break;  // the daemon may close before the last chunk
  }
  EXPECT_EQ(c.ReadResponse(),
            ErrorResponse(413, "Payload Too Large",
                          "chunked request body over the limit of 4194304 bytes", true));
  EXPECT_TRUE(PoolDrains());
}

TEST_F(HttpRobustnessTest, ContentLengthMismatchesAndBadValues) {
  {  // Shorter body, then the client closes: no answer, the buffer returns to the pool.
    RawConn c(shoald_.port());
    ASSERT_TRUE(c.Send("POST /fn/echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n0123456789"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GT(PoolUsed(), 0);  // the gateway holds the 100-byte buffer meanwhile
    c.ShutdownWrite();
    bool closed = false;
    EXPECT_EQ(c.ReadAll(5000, &closed), "");
    EXPECT_TRUE(closed);
    EXPECT_TRUE(PoolDrains());
  }
  {  // Longer body: the extra bytes are the next request on the connection.
    RawConn c(shoald_.port());
    ASSERT_TRUE(c.Send(EchoRequest("hello") + "EXTRA\r\n\r\n"));
    EXPECT_EQ(c.ReadResponse(), EchoResponse("hello", "text/x-echo", false));
    EXPECT_EQ(c.ReadResponse(), Malformed("invalid HTTP method"));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  const std::vector<std::string> bad = {
      "-1", "-0", "1e3", "0x10", "99999999999999999999999", "18446744073709551615", "5, 6"};
  for (const std::string& v : bad) {
    bool closed = false;
    const std::string got =
        OneShot("POST /fn/echo HTTP/1.1\r\nContent-Length: " + v + "\r\n\r\nhello", &closed);
    EXPECT_EQ(got, Malformed("invalid character in content-length header")) << v;
    EXPECT_TRUE(closed) << v;
  }
  {  // Two different lengths, or a length beside chunked: refused (request smuggling).
    bool closed = false;
    EXPECT_EQ(OneShot("POST /fn/echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
                      "hello!",
                      &closed),
              Malformed("unexpected content-length header"));
    EXPECT_EQ(OneShot("POST /fn/echo HTTP/1.1\r\nContent-Length: 5\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                      &closed),
              Malformed("unexpected content-length header"));
  }
  {  // A length the parser accepts but far over the function's limit: 413 before any body.
    bool closed = false;
    const std::string got =
        OneShot("POST /fn/echo HTTP/1.1\r\nContent-Length: 1000000000000000000\r\n\r\nxx", &closed);
    EXPECT_EQ(got, ErrorResponse(413, "Payload Too Large",
                                 "request body of 1000000000000000000 bytes is over the limit of "
                                 "4194304 bytes for function 'echo'",
                                 true));
    EXPECT_TRUE(closed);
  }
}

TEST_F(HttpRobustnessTest, PipelinedRequestsAnswerInOrder) {
  const std::string a = RandomBytes(70000, 1);  // larger than the read buffer
  const std::string c = "third";
  RawConn conn(shoald_.port());
  ASSERT_TRUE(conn.Send(EchoRequest(a) + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" +
                        EchoRequest(c, "Connection: close\r\n")));
  bool closed = false;
  const std::string got = conn.ReadAll(10000, &closed);
  const std::string want =
      EchoResponse(a, "text/x-echo", false) +
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n" +
      EchoResponse(c, "text/x-echo", true);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "pipelined responses differ";
  EXPECT_TRUE(closed);

  // Small ones in one segment, many times over, with a chunked one in the middle.
  RawConn many(shoald_.port());
  std::string batch, expect;
  for (int i = 0; i < 20; ++i) {
    const std::string body = "req-" + std::to_string(i);
    if (i == 10) {
      batch +=
          "POST /fn/echo HTTP/1.1\r\nContent-Type: text/x-echo\r\n"
          "Transfer-Encoding: chunked\r\n\r\n3\r\nreq\r\n3\r\n-10\r\n0\r\n\r\n";
    } else {
      batch += EchoRequest(body);
    }
    expect += EchoResponse(body, "text/x-echo", false);
  }
  ASSERT_TRUE(many.Send(batch));
  std::string responses;
  for (int i = 0; i < 20; ++i) responses += many.ReadResponse();
  EXPECT_EQ(responses, expect);
}

TEST_F(HttpRobustnessTest, AClientThatShutsItsSideIsAnsweredThenClosed) {
  // The gateway keeps reading while a request is served: a FIN that arrives meanwhile must not
  // lose the answers to what was already sent (two pipelined requests here).
  RawConn c(shoald_.port());
  ASSERT_TRUE(c.Send(EchoRequest("first") + EchoRequest(RandomBytes(90000, 7))));
  c.ShutdownWrite();
  bool closed = false;
  const std::string got = c.ReadAll(10000, &closed);
  const std::string want = EchoResponse("first", "text/x-echo", false) +
                           EchoResponse(RandomBytes(90000, 7), "text/x-echo", false);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "answers after the client's FIN differ";
  EXPECT_TRUE(closed);
  // A FIN in the middle of the second request's body: the first is answered, then the
  // connection closes without an answer for the cut one, and its buffer goes back.
  RawConn cut(shoald_.port());
  ASSERT_TRUE(
      cut.Send(EchoRequest("whole") + "POST /fn/echo HTTP/1.1\r\nContent-Length: 50\r\n\r\nhalf"));
  cut.ShutdownWrite();
  EXPECT_EQ(cut.ReadAll(10000, &closed), EchoResponse("whole", "text/x-echo", false));
  EXPECT_TRUE(closed);
  // Resets while requests are in flight leave no buffer behind.
  for (int i = 0; i < 20; ++i) {
    RawConn r(shoald_.port());
    ASSERT_TRUE(r.Send(EchoRequest(RandomBytes(20000, 50 + i))));
    r.Reset();
  }
  EXPECT_TRUE(PoolDrains()) << "pool bytes in use: " << PoolUsed();
  const HttpResult ok = Http(shoald_.port(), "POST", "/fn/echo", "still here");
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_EQ(ok.body, "still here");
}

TEST_F(HttpRobustnessTest, Http10ClosesUnlessKeepAlive) {
  {
    bool closed = false;
    const std::string got = OneShot("GET /healthz HTTP/1.0\r\n\r\n", &closed);
    EXPECT_EQ(got,
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
              "Connection: close\r\n\r\nok\n");
    EXPECT_TRUE(closed);
  }
  {
    bool closed = false;
    const std::string got = OneShot(
        "POST /fn/echo HTTP/1.0\r\nContent-Type: text/x-echo\r\nContent-Length: 4\r\n\r\nabcd",
        &closed);
    EXPECT_EQ(got, EchoResponse("abcd", "text/x-echo", true));
    EXPECT_TRUE(closed);
  }
  {  // HTTP/1.0 with keep-alive: the connection stays open for a second request.
    RawConn c(shoald_.port());
    ASSERT_TRUE(c.Send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    EXPECT_EQ(c.ReadResponse(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n");
    ASSERT_TRUE(c.Send("GET /nowhere HTTP/1.0\r\n\r\n"));
    EXPECT_EQ(c.ReadResponse(), ErrorResponse(404, "Not Found", "no route for /nowhere", true));
    EXPECT_TRUE(c.ClosedByPeer());
  }
}

TEST_F(HttpRobustnessTest, ClientsThatDisconnectMidBodyLeakNothing) {
  for (int i = 0; i < 20; ++i) {
    RawConn c(shoald_.port());
    ASSERT_TRUE(c.ok());
    const size_t total = 1 << 20;
    ASSERT_TRUE(c.Send("POST /fn/echo HTTP/1.1\r\nContent-Length: " + std::to_string(total) +
                       "\r\n\r\n" + RandomBytes(100000 + 1000 * i, i)));
    if (i % 2 == 0) c.Reset();  // RST; the others close with FIN (destructor)
  }
  for (int i = 0; i < 20; ++i) {  // chunked bodies cut off inside a chunk
    RawConn c(shoald_.port());
    ASSERT_TRUE(
        c.Send("POST /fn/echo/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               "10000\r\n" +
               RandomBytes(30000 + 100 * i, 100 + i)));
    if (i % 2 == 0) c.Reset();
  }
  EXPECT_TRUE(PoolDrains()) << "pool bytes in use: " << PoolUsed();
  // A body cut off after the gateway handed nothing to the instance does not count as served.
  const HttpResult ok = Http(shoald_.port(), "POST", "/fn/echo", "still here");
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_EQ(ok.body, "still here");
}

TEST_F(HttpRobustnessTest, TwoHundredGarbageConnections) {
  std::mt19937 rng(20261123);
  const std::vector<std::string> prefixes = {
      "",
      "GET ",
      "POST /fn/echo HTTP/1.1\r\n",
      "GET /v1/functions HTTP/1.1\r\nHost: x\r\n",
      "POST /fn/echo HTTP/1.1\r\nContent-Length: 10\r\n\r\n",
      "POST /fn/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"};
  int answered = 0;
  for (int i = 0; i < 200; ++i) {
    RawConn c(shoald_.port());
    ASSERT_TRUE(c.ok()) << "connection " << i;
    const std::string garbage =
        prefixes[rng() % prefixes.size()] + RandomBytes(1 + rng() % 4096, static_cast<uint32_t>(i));
    c.Send(garbage);  // the daemon may close before it has read all of it
    if (rng() % 4 == 0) {
      c.Reset();
      continue;
    }
    c.ShutdownWrite();
    bool closed = false;
    const std::string got = c.ReadAll(10000, &closed);
    EXPECT_TRUE(closed) << "connection " << i << " left open after EOF";
    if (got.empty()) continue;
    ++answered;
    // Whatever came back is a well-formed response: 2xx (a body of garbage echoes fine) or a
    // JSON error from the gateway.
    ASSERT_GE(got.size(), 12u);
    EXPECT_EQ(got.substr(0, 9), "HTTP/1.1 ") << "connection " << i;
    const int status = std::stoi(got.substr(9, 3));
    EXPECT_TRUE(status == 200 || status == 400 || status == 404 || status == 405 || status == 413 ||
                status == 431)
        << "connection " << i << ": " << got.substr(0, 200);
    if (status >= 400) {
      const size_t body = got.find("\r\n\r\n");
      ASSERT_NE(body, std::string::npos);
      EXPECT_EQ(got.substr(body + 4, 10), "{\"error\":\"") << "connection " << i;
    }
  }
  EXPECT_GT(answered, 50);  // most garbage gets a 400, not silence
}

}  // namespace
}  // namespace shoal::testing
