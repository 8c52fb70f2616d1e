// The fleet control routes run on control threads: while one is busy (a join's or an
// evaluation's file I/O), the same gateway loop keeps serving other connections, and a client
// that leaves before its control reply does not disturb the loop. A real Gateway with one
// loop, real sockets, the unix data plane.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>

#include "shoal/gateway/gateway.h"

namespace shoal {
namespace {

class BlockingControl : public HttpService {
 public:
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view,
                   std::string_view, const auth::Principal& who) override {
    std::unique_lock lock(mu);
    ++calls;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
    HttpReply r;
    r.status = 200;
    r.body = std::string(method) + " " + std::string(path) + " for " + who.name + "\n";
    r.headers.emplace_back("X-Job", "j");
    return r;
  }
  bool WaitCalls(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return calls >= n; });
  }
  void Release() {
    std::lock_guard lock(mu);
    released = true;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  bool released = false;
};

class NoScale : public ScaleSignal {
 public:
  void Poke() override {}
};

int Connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
}

// Reads until `want` bytes have arrived or `timeout_ms` passes without any.
std::string Receive(int fd, size_t want, int timeout_ms) {
  std::string out;
  char buf[4096];
  while (out.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class GatewayControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("shoal-gw-control-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    config_.node_name = "gwctl" + std::to_string(getpid());
    config_.listen_host = "127.0.0.1";
    config_.listen_port = 0;
    config_.gateway_threads = 1;
    config_.dataplane = DataPlaneMode::kUnix;
    auto dp = CreateDataPlane(config_);
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dataplane_ = std::move(*dp);
    auto tokens = auth::TokenStore::Open((dir_ / "tokens").string());
    ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
    tokens_ = std::move(*tokens);
    auto tok = tokens_->Create({"client-a", auth::Role::kFlClient, "", "j"}, true);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    bearer_ = tok->token;
    GatewayHooks hooks;
    hooks.control = &control_;
    hooks.tokens = tokens_.get();
    gateway_ = std::make_unique<Gateway>(config_, functions_, *dataplane_, scale_, metrics_, hooks);
    ASSERT_TRUE(gateway_->Start().ok());
  }
  void TearDown() override {
    control_.Release();
    if (gateway_) gateway_->Stop();
    std::filesystem::remove_all(dir_);
  }
  std::string JobStatusRequest() const {
    return "GET /v1/jobs/j HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer_ + "\r\n\r\n";
  }

  std::filesystem::path dir_;
  NodeConfig config_;
  std::unique_ptr<DataPlane> dataplane_;
  std::unique_ptr<auth::TokenStore> tokens_;
  std::string bearer_;
  FunctionTable functions_;
  NoScale scale_;
  NodeMetrics metrics_;
  BlockingControl control_;
  std::unique_ptr<Gateway> gateway_;
};

TEST_F(GatewayControlTest, TheLoopServesOthersWhileAControlCallRuns) {
  ASSERT_EQ(gateway_->loops(), 1u);
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  SendAll(a, JobStatusRequest());
  ASSERT_TRUE(control_.WaitCalls(1));

  // The only loop answers another connection while the control call is held.
  const int b = Connect(gateway_->port());
  ASSERT_GE(b, 0);
  SendAll(b, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string expected_health =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n";
  EXPECT_EQ(Receive(b, expected_health.size(), 10000), expected_health);
  EXPECT_EQ(Receive(a, 1, 100), "");  // still waiting

  control_.Release();
  const std::string body = "GET /v1/jobs/j for client-a\n";
  const std::string expected = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nX-Job: j\r\n\r\n" + body;
  EXPECT_EQ(Receive(a, expected.size(), 10000), expected);

  // The connection stays usable: a pipelined pair is answered in order.
  SendAll(a, JobStatusRequest() + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Receive(a, expected.size() + expected_health.size(), 10000),
            expected + expected_health);
  close(a);
  close(b);
}

TEST_F(GatewayControlTest, AClientThatLeavesBeforeItsReplyIsForgotten) {
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  SendAll(a, JobStatusRequest());
  ASSERT_TRUE(control_.WaitCalls(1));
  close(a);
  // Give the loop time to see the close, then let the reply come back to a closed connection.
  const int b = Connect(gateway_->port());
  SendAll(b, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string health =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n";
  EXPECT_EQ(Receive(b, health.size(), 10000), health);
  control_.Release();
  // The loop goes on: the next control call on b is answered.
  SendAll(b, JobStatusRequest());
  const std::string body = "GET /v1/jobs/j for client-a\n";
  const std::string expected = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nX-Job: j\r\n\r\n" + body;
  EXPECT_EQ(Receive(b, expected.size(), 10000), expected);
  close(b);
}

TEST_F(GatewayControlTest, FleetRoutesStillNeedAToken) {
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  SendAll(a, "GET /v1/jobs/j HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = Receive(a, 1, 10000);
  EXPECT_EQ(got.rfind("HTTP/1.1 401 Client Error\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("WWW-Authenticate: Bearer realm=\"shoal\""), std::string::npos);
  EXPECT_EQ(control_.calls, 0);
  close(a);
}

}  // namespace
}  // namespace shoal
