// The control listener over real sockets: what it answers before ControlApi (the OpenAPI
// document, methods httplib has no handler for, paths whose decoding holds a line break) and
// that a body on a method httplib does not read never becomes the next request. Requests are
// written byte for byte, as schemathesis (tests/integration/openapi_test.py) sent the ones that
// found each case.
#include "shoal/control/server/control_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "registry_fixture.h"
#include "shoal/control/schemas/schemas.h"
#include "shoal/security/auth/token_store.h"

namespace shoal {
namespace {

class NoRuntime : public RuntimeView {
 public:
  void FunctionsChanged() override {}
  FunctionStats Stats(const std::string&) override { return {}; }
  LogChunk Logs(const std::string&, uint64_t, uint64_t) override { return {}; }
  std::string DataPlaneMode() override { return "unix"; }
};

class ControlServerTest : public ControlApiFixture {
 protected:
  void SetUp() override {
    OpenRegistry("shoal-control-server-test");
    config_.control_listen_host = "127.0.0.1";
    config_.control_port = 0;
    auto tokens = auth::TokenStore::Open("");  // in memory
    ASSERT_TRUE(tokens.ok()) << tokens.status().message();
    tokens_ = std::move(*tokens);
    auto admin = tokens_->Create(auth::TokenRequest{"admin", auth::Role::kAdmin, "", ""});
    ASSERT_TRUE(admin.ok()) << admin.status().message();
    token_ = admin->token;
    api_ = std::make_unique<ControlApi>(*reg_, runtime_, nullptr, tokens_.get());
    server_ = std::make_unique<ControlServer>(config_, *api_, *tokens_);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    server_->Stop();
    server_.reset();
    ControlApiFixture::TearDown();
  }

  // Writes `bytes` on one new connection and returns everything the server sends until it
  // closes the connection or stays silent for 2 s.
  std::string Exchange(const std::string& bytes) const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server_->port());
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    std::string out;
    char buf[65536];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
    close(fd);
    return out;
  }
  std::string Auth() const { return "Authorization: Bearer " + token_ + "\r\n"; }

  NoRuntime runtime_;
  std::unique_ptr<auth::TokenStore> tokens_;
  std::unique_ptr<ControlServer> server_;
  std::string token_;
};

// The responses in `raw`, each "status line\r\n...headers...\r\n\r\nbody" split at its
// Content-Length.
struct Response {
  std::string head;
  std::string body;
};
std::vector<Response> Split(std::string raw) {
  std::vector<Response> out;
  while (!raw.empty()) {
    const size_t end = raw.find("\r\n\r\n");
    if (end == std::string::npos) break;
    Response r;
    r.head = raw.substr(0, end);
    size_t length = 0;
    if (const size_t cl = r.head.find("Content-Length: "); cl != std::string::npos) {
      length = std::stoul(r.head.substr(cl + 16));
    }
    r.body = raw.substr(end + 4, length);
    raw.erase(0, end + 4 + length);
    out.push_back(std::move(r));
  }
  return out;
}

TEST_F(ControlServerTest, ServesItsOpenApiDocumentWithoutAToken) {
  auto r = Split(Exchange("GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].head.starts_with("HTTP/1.1 200 OK")) << r[0].head;
  EXPECT_NE(r[0].head.find("Content-Type: application/json"), std::string::npos);
  EXPECT_EQ(r[0].body, api::OpenApiJson());
  const auto doc = nlohmann::json::parse(r[0].body);
  EXPECT_EQ(doc["openapi"], "3.1.0");
  EXPECT_TRUE(doc["paths"].contains("/v1/openapi.json"));
  auto post =
      Split(Exchange("POST /v1/openapi.json HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n"));
  ASSERT_EQ(post.size(), 1u);
  EXPECT_TRUE(post[0].head.starts_with("HTTP/1.1 405")) << post[0].head;
  EXPECT_NE(post[0].head.find("Allow: GET, HEAD"), std::string::npos);
}

// httplib answers a method it parses but has no handler for (TRACE, CONNECT) with an empty 400;
// the route now says 405 and the methods it has, as for any other method it lacks.
TEST_F(ControlServerTest, AMethodWithoutAHandlerIs405NamingTheRoutesMethods) {
  auto r = Split(Exchange("TRACE /v1/functions HTTP/1.1\r\nHost: x\r\n" + Auth() +
                          "Connection: close\r\n\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].head.starts_with("HTTP/1.1 405")) << r[0].head;
  EXPECT_NE(r[0].head.find("Allow: GET, POST"), std::string::npos) << r[0].head;
  EXPECT_EQ(nlohmann::json::parse(r[0].body)["error"],
            "method TRACE not allowed on /v1/functions (allowed: GET, POST)");
  // A method httplib's request-line parser does not know (QUERY) was an empty 400 that kept the
  // connection with its body unread: now the API's JSON error, and the connection closes.
  auto query = Split(Exchange("QUERY /v1/ui-info HTTP/1.1\r\nHost: x\r\n" + Auth() +
                              "Content-Length: 3\r\n\r\nabcGET /v1/ui-info HTTP/1.1\r\n\r\n"));
  ASSERT_EQ(query.size(), 1u);
  EXPECT_TRUE(query[0].head.starts_with("HTTP/1.1 400")) << query[0].head;
  EXPECT_NE(query[0].head.find("Connection: close"), std::string::npos) << query[0].head;
  EXPECT_EQ(nlohmann::json::parse(query[0].body)["error"],
            "malformed request (method 'QUERY'): the control API takes GET, HEAD, POST, PUT, "
            "PATCH, DELETE and OPTIONS");
}

// An OPTIONS with a body, then a GET on the same connection: the body was left unread and
// parsed as the start of the GET, which got an empty 400. Now the first reply closes the
// connection (the client sends the GET on a new one).
TEST_F(ControlServerTest, ABodyOnAMethodWithoutOneClosesTheConnection) {
  const std::string get = "GET /v1/ui-info HTTP/1.1\r\nHost: x\r\n" + Auth() + "\r\n";
  auto r = Split(Exchange("OPTIONS /v1/functions HTTP/1.1\r\nHost: x\r\n" + Auth() +
                          "Content-Type: application/yaml\r\nContent-Length: 3\r\n\r\nabc" + get));
  ASSERT_GE(r.size(), 1u);
  EXPECT_TRUE(r[0].head.starts_with("HTTP/1.1 405")) << r[0].head;
  EXPECT_NE(r[0].head.find("Connection: close"), std::string::npos) << r[0].head;
  EXPECT_EQ(r.size(), 1u) << "answered after the close: " << r.back().head;
  // Without a body the connection stays open for the next request.
  auto open = Split(Exchange("OPTIONS /v1/functions HTTP/1.1\r\nHost: x\r\n" + Auth() + "\r\n"));
  ASSERT_EQ(open.size(), 1u);
  EXPECT_TRUE(open[0].head.starts_with("HTTP/1.1 405")) << open[0].head;
  EXPECT_EQ(open[0].head.find("Connection: close"), std::string::npos) << open[0].head;
}

// %0D decodes to '\r', which '.' in httplib's route pattern did not match: 404 with no body.
TEST_F(ControlServerTest, APathWithAnEncodedLineBreakReachesTheApi) {
  auto r = Split(Exchange("DELETE /v1/jobs/a%0Db HTTP/1.1\r\nHost: x\r\n" + Auth() +
                          "Connection: close\r\n\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].head.starts_with("HTTP/1.1 501")) << r[0].head;  // no job service here
  EXPECT_NE(r[0].head.find("Content-Type: application/json"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(r[0].body).contains("error"));
}

}  // namespace
}  // namespace shoal
