// The fleet control routes run on control threads: while one is busy (a join's or an
// evaluation's file I/O), the same gateway loop keeps serving other connections, and a client
// that leaves before its control reply does not disturb the loop. Likewise an FL update whose
// job's top is on another node waits for the top's admission off the loop. A real Gateway
// with one loop, real sockets, the unix data plane, a real shared-memory pool.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/payload.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "tests/support/loopback.h"

namespace shoal {
namespace {

class BlockingControl : public HttpService {
 public:
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view,
                   std::string_view, const auth::Principal& who, const ServiceHeaders&) override {
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

int Connect(uint16_t port) { return testing::ConnectLoopback(port); }

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

// /healthz and its whole answer: a loop that answers it is serving that connection.
const std::string kHealthzRequest = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
const std::string kHealthzReply =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n";

// Asks /healthz on `fd` and expects its whole answer.
void ExpectHealthzAnswered(int fd) {
  SendAll(fd, kHealthzRequest);
  EXPECT_EQ(Receive(fd, kHealthzReply.size(), 10000), kHealthzReply);
}

// A gateway with one loop on a free loopback port, its data plane on unix sockets: what each
// fixture below starts with its own hooks.
class OneLoopGatewayTest : public ::testing::Test {
 protected:
  // The node's config and data plane (node `name` + this process's id).
  void MakeDataPlane(const std::string& name) {
    config_.node_name = name + std::to_string(getpid());
    config_.listen_host = "127.0.0.1";
    config_.listen_port = 0;
    config_.gateway_threads = 1;
    config_.dataplane = DataPlaneMode::kUnix;
    auto dp = CreateDataPlane(config_);
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dataplane_ = std::move(*dp);
  }
  void StartGateway(const GatewayHooks& hooks) {
    gateway_ = std::make_unique<Gateway>(config_, functions_, *dataplane_, scale_, metrics_, hooks);
    ASSERT_TRUE(gateway_->Start().ok());
  }
  // The gateway goes first: it points at the fixtures' hooks, and its functions at the pool.
  void TearDown() override {
    if (gateway_) gateway_->Stop();
    gateway_.reset();
  }

  NodeConfig config_;
  std::unique_ptr<DataPlane> dataplane_;
  std::unique_ptr<ShmPool> pool_;  // for the fixtures whose functions use one
  FunctionTable functions_;
  NoScale scale_;
  NodeMetrics metrics_;
  std::unique_ptr<Gateway> gateway_;
};

class GatewayControlTest : public OneLoopGatewayTest {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("shoal-gw-control-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    ASSERT_NO_FATAL_FAILURE(MakeDataPlane("gwctl"));
    auto tokens = auth::TokenStore::Open((dir_ / "tokens").string());
    ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
    tokens_ = std::move(*tokens);
    auto tok = tokens_->Create({"client-a", auth::Role::kFlClient, "", "j"}, true);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    bearer_ = tok->token;
    GatewayHooks hooks;
    hooks.control = &control_;
    hooks.tokens = tokens_.get();
    StartGateway(hooks);
  }
  void TearDown() override {
    control_.Release();
    OneLoopGatewayTest::TearDown();
    std::filesystem::remove_all(dir_);
  }
  std::string JobStatusRequest() const {
    return "GET /v1/jobs/j HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bearer_ + "\r\n\r\n";
  }

  std::filesystem::path dir_;
  std::unique_ptr<auth::TokenStore> tokens_;
  std::string bearer_;
  BlockingControl control_;
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
  ExpectHealthzAnswered(b);
  EXPECT_EQ(Receive(a, 1, 100), "");  // still waiting

  control_.Release();
  const std::string body = "GET /v1/jobs/j for client-a\n";
  const std::string expected =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nX-Job: j\r\n\r\n" + body;
  EXPECT_EQ(Receive(a, expected.size(), 10000), expected);

  // The connection stays usable: a pipelined pair is answered in order.
  SendAll(a, JobStatusRequest() + kHealthzRequest);
  EXPECT_EQ(Receive(a, expected.size() + kHealthzReply.size(), 10000), expected + kHealthzReply);
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
  ExpectHealthzAnswered(b);
  control_.Release();
  // The loop goes on: the next control call on b is answered.
  SendAll(b, JobStatusRequest());
  const std::string body = "GET /v1/jobs/j for client-a\n";
  const std::string expected =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nX-Job: j\r\n\r\n" + body;
  EXPECT_EQ(Receive(b, expected.size(), 10000), expected);
  close(b);
}

TEST_F(GatewayControlTest, FleetRoutesStillNeedAToken) {
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  SendAll(a, "GET /v1/jobs/j HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = Receive(a, 1, 10000);
  EXPECT_EQ(got.rfind("HTTP/1.1 401 Unauthorized\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("WWW-Authenticate: Bearer realm=\"shoal\""), std::string::npos);
  EXPECT_EQ(control_.calls, 0);
  close(a);
}

// Cluster mode: job "j" is folded here for a top elsewhere. Each admission waits until the test
// answers it from its own thread, as the peer link's answer comes. The gateway sends the top
// the update's header only, before it reads the body: no pool memory until the top admitted it.
class SlowTop : public FlDataPath {
 public:
  std::string LeafFunction(std::string_view job) override { return "fl." + std::string(job); }
  bool FoldsForOtherNode(std::string_view job) override { return job == "j"; }
  Result<FlAdmission> Admit(std::string_view, BufferPool&, std::span<const std::byte>,
                            uint64_t) override {
    return Internal("the gateway must not admit a member job's update itself");
  }
  void AdmitForTopAsync(std::string_view, BufferPool&, std::span<const std::byte> body,
                        uint64_t buffer, std::string_view bearer, AdmitDone done) override {
    std::lock_guard lock(mu);
    bodies.emplace_back(reinterpret_cast<const char*>(body.data()), body.size());
    buffers.push_back(buffer);
    bearers.emplace_back(bearer);
    waiting.push_back(std::move(done));
    cv.notify_all();
  }
  Status HoldUpdate(uint64_t ticket, BufferPool& pool, uint64_t buffer) override {
    std::lock_guard lock(mu);
    held[ticket] = {&pool, buffer};
    return pool.Retain(buffer, kCoordinatorSlot);
  }
  Result<uint64_t> PartialFor(uint64_t, uint32_t) override { return NotFound("no leaf here"); }
  void Completed(uint64_t ticket, int http_status, bool) override {
    std::lock_guard lock(mu);
    completed.emplace_back(ticket, http_status);
    auto it = held.find(ticket);
    if (it == held.end()) return;
    // What reached the leaf's dispatch: the update's whole body in the held buffer.
    PayloadView v = ReadPayload(it->second.first->Data(it->second.second));
    folded[ticket] = v.valid
                         ? std::string(reinterpret_cast<const char*>(v.body.data()), v.body.size())
                         : std::string("(no payload)");
    (void)it->second.first->Release(it->second.second, kCoordinatorSlot);
    held.erase(it);
  }
  bool WaitAdmits(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return bearers.size() >= n; });
  }
  // Answers the oldest waiting admission from another thread.
  void Answer(Result<FlAdmission> a) {
    AdmitDone done;
    {
      std::lock_guard lock(mu);
      done = std::move(waiting.front());
      waiting.erase(waiting.begin());
    }
    std::thread([done = std::move(done), a = std::move(a)] { done(a); }).join();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<AdmitDone> waiting;
  std::vector<std::string> bodies, bearers;
  std::vector<uint64_t> buffers;
  std::map<uint64_t, std::pair<BufferPool*, uint64_t>> held;
  std::map<uint64_t, std::string> folded;
  std::vector<std::pair<uint64_t, int>> completed;
};

class GatewayFlAdmitTest : public OneLoopGatewayTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MakeDataPlane("gwfl"));
    auto pool = ShmPool::Create("shoal-gwfl-" + std::to_string(getpid()), 16 << 20);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
    FunctionSpec leaf;
    leaf.name = "fl.j";
    leaf.id = 7;
    leaf.tenant = "default";
    leaf.timeout_s = 30;
    // No instance and no queue: an admitted update is refused with 503 when dispatched, which
    // shows the admission reached the dispatch (the leaf path is the integration tests').
    functions_.Set(leaf.name, std::make_shared<FunctionRuntime>(leaf, pool_.get(), metrics_, 0));
    GatewayHooks hooks;
    hooks.fl = &top_;
    StartGateway(hooks);
  }
  // An update's body: "SHU1", the header's length, the header, the tensors.
  static std::string Body(const std::string& header, const std::string& tensors) {
    const auto hlen = static_cast<uint32_t>(header.size());
    std::string b = "SHU1";
    b.append(reinterpret_cast<const char*>(&hlen), 4);
    return b + header + tensors;
  }
  static std::string Update(const std::string& body) {
    return "POST /v1/jobs/j/updates HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-1\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  // The whole error answer, {"error": message}; the connection closes after a refusal.
  static std::string Error(const std::string& status_line, const std::string& message,
                           bool close = true) {
    const std::string json = "{\"error\":\"" + message + "\"}\n";
    return "HTTP/1.1 " + status_line +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(json.size()) +
           (close ? "\r\nConnection: close" : "") + "\r\n\r\n" + json;
  }
  // Whether the peer closed the connection (EOF or reset) within 10 s.
  static bool Closed(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return false;
    char c;
    return recv(fd, &c, 1, 0) <= 0;
  }

  SlowTop top_;
};

TEST_F(GatewayFlAdmitTest, TheLoopServesOthersWhileTheTopAdmitsAnUpdate) {
  ASSERT_EQ(gateway_->loops(), 1u);
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  SendAll(a, Update(Body("head-one", "tensors-one")));
  ASSERT_TRUE(top_.WaitAdmits(1));
  EXPECT_EQ(top_.bearers[0], "tok-1");
  EXPECT_EQ(top_.bodies[0], Body("head-one", ""));  // the header only
  EXPECT_EQ(top_.buffers[0], 0u);
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);

  // The only loop answers another connection while the top has not answered.
  const int b = Connect(gateway_->port());
  ASSERT_GE(b, 0);
  ExpectHealthzAnswered(b);
  EXPECT_EQ(Receive(a, 1, 100), "");  // still waiting for the top

  // The top's refusal is the client's answer, as a synchronous admission's was, and the
  // connection closes (its body was never read).
  top_.Answer(PermissionDenied("bad token for client 'c3'"));
  std::string want = Error("403 Forbidden", "bad token for client 'c3'");
  EXPECT_EQ(Receive(a, want.size(), 10000), want);
  EXPECT_TRUE(Closed(a));
  close(a);
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);

  // A top that cannot be reached (Unavailable) is a 502 with its reason; a duplicate the 409 a
  // local update gets.
  const std::pair<Status, std::string> refusals[] = {
      {Unavailable("job 'j': admitting the update at its top, node n0: no reply"),
       Error("502 Bad Gateway", "job 'j': admitting the update at its top, node n0: no reply")},
      {AlreadyExists("client 'c3' already sent an update for this round"),
       Error("409 Conflict", "client 'c3' already sent an update for this round")}};
  size_t n = 1;
  for (const auto& [st, answer] : refusals) {
    const int c = Connect(gateway_->port());
    SendAll(c, Update(Body("head", "tensors")));
    ASSERT_TRUE(top_.WaitAdmits(++n));
    top_.Answer(st);
    EXPECT_EQ(Receive(c, answer.size(), 10000), answer);
    EXPECT_TRUE(Closed(c));
    close(c);
  }

  // Admitted: the body is read into the pool then, held for the coordinator, and goes on to
  // the leaf function's dispatch (here: no room, 503); the coordinator hears once that its
  // ticket failed, and its buffer held the whole update.
  const int d = Connect(gateway_->port());
  SendAll(d, Update(Body("head-four", "tensors-four")));
  ASSERT_TRUE(top_.WaitAdmits(++n));
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
  top_.Answer(FlAdmission{41, 0.5f});
  const std::string got = Receive(d, 1, 10000);
  EXPECT_EQ(got.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("function 'fl.j' has too many queued requests"), std::string::npos) << got;
  {
    std::lock_guard lock(top_.mu);
    ASSERT_EQ(top_.completed.size(), 1u);
    EXPECT_EQ(top_.completed[0], std::make_pair(uint64_t{41}, 503));
    EXPECT_EQ(top_.folded[41], Body("head-four", "tensors-four"));
  }
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
  close(d);
  close(b);
}

TEST_F(GatewayFlAdmitTest, ARefusedUpdateNeverTakesPoolMemoryBeyondItsHeader) {
  // 12 MiB of tensors behind a small header; the client sends it all at once (its sends block
  // once the gateway stops reading).
  const std::string body = Body("client-c9", std::string(12 << 20, '\x11'));
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  std::atomic<bool> sent_all{false};
  std::thread sender([&] {
    const std::string req = Update(body);
    size_t off = 0;
    while (off < req.size()) {
      const ssize_t k = send(a, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (k <= 0) return;
      off += static_cast<size_t>(k);
    }
    sent_all = true;
  });
  ASSERT_TRUE(top_.WaitAdmits(1));
  EXPECT_EQ(top_.bodies[0], Body("client-c9", ""));
  // While the top decides: no pool buffer, no pool byte.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(pool_->Stats().live_buffers, 0u);
    EXPECT_EQ(pool_->Stats().used_bytes, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(sent_all.load());  // the gateway stopped reading after the header
  top_.Answer(Unauthenticated("token of client 'c9' is not valid"));
  const std::string want = Error("401 Unauthorized", "token of client 'c9' is not valid");
  std::string got = Receive(a, want.size() + 40, 10000);  // (+ WWW-Authenticate)
  EXPECT_EQ(got.rfind("HTTP/1.1 401 Unauthorized\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("{\"error\":\"token of client 'c9' is not valid\"}"), std::string::npos)
      << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  // The rest of the body is dropped as it comes, then the connection closes.
  sender.join();
  EXPECT_TRUE(sent_all.load());
  EXPECT_TRUE(Closed(a));
  close(a);
  const PoolStats after = pool_->Stats();
  EXPECT_EQ(after.live_buffers, 0u);
  EXPECT_EQ(after.used_bytes, 0u);
  EXPECT_EQ(after.alloc_failures, 0u);
  {
    std::lock_guard lock(top_.mu);
    EXPECT_TRUE(top_.completed.empty());
    EXPECT_TRUE(top_.held.empty());
  }
}

TEST_F(GatewayFlAdmitTest, AnAdmittedLargeUpdateIsReadWholeIntoThePool) {
  std::string tensors(6 << 20, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i] = static_cast<char>(i * 7 + 3);
  const std::string body = Body("client-c8", tensors);
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  std::thread sender([&] { SendAll(a, Update(body)); });
  ASSERT_TRUE(top_.WaitAdmits(1));
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
  top_.Answer(FlAdmission{77, 1.0f});
  sender.join();
  const std::string got = Receive(a, 1, 10000);
  EXPECT_EQ(got.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << got;
  {
    std::lock_guard lock(top_.mu);
    ASSERT_EQ(top_.completed.size(), 1u);
    EXPECT_EQ(top_.completed[0], std::make_pair(uint64_t{77}, 503));
    EXPECT_TRUE(top_.folded[77] == body) << "the held buffer does not hold the update's bytes";
  }
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
  close(a);
}

TEST_F(GatewayFlAdmitTest, AMalformedOrChunkedMemberUpdateIsRefusedBeforeTheTopIsAsked) {
  const int a = Connect(gateway_->port());
  SendAll(a, Update("XXXX1234-not-an-update"));
  std::string want = Error("400 Bad Request", "bad magic: an update body starts with \\\"SHU1\\\"");
  EXPECT_EQ(Receive(a, want.size(), 10000), want);
  EXPECT_TRUE(Closed(a));
  close(a);
  // The prefix's other refusals, with the wire format's own messages (one parser: ParsePrefix).
  const std::string header_past_body = Body(std::string(16, 'h'), "").substr(0, 12);
  const std::pair<std::string, std::string> refused[] = {
      {"SHU1\x01", "update body truncated: 5 bytes, shorter than the 8-byte prefix"},
      {header_past_body, "header length 16 runs past the end of the body (12 bytes)"},
      {"SHU1" + std::string("\x00\x00\x20\x00", 4) + "x",
       "header length 2097152 exceeds the limit 1048576"},
  };
  for (const auto& [body, message] : refused) {
    const int c = Connect(gateway_->port());
    SendAll(c, Update(body));
    const std::string error = Error("400 Bad Request", message);
    EXPECT_EQ(Receive(c, error.size(), 10000), error);
    EXPECT_TRUE(Closed(c));
    close(c);
  }
  const int b = Connect(gateway_->port());
  SendAll(b,
          "POST /v1/jobs/j/updates HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-1\r\n"
          "Transfer-Encoding: chunked\r\n\r\n4\r\nSHU1\r\n0\r\n\r\n");
  const std::string got = Receive(b, 1, 10000);
  EXPECT_EQ(got.rfind("HTTP/1.1 411 Length Required\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("send the update with a Content-Length"), std::string::npos) << got;
  close(b);
  std::lock_guard lock(top_.mu);
  EXPECT_TRUE(top_.bodies.empty());
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

TEST_F(GatewayFlAdmitTest, AnUpdateWhoseClientLeftBeforeTheTopAdmittedItDoesNotCount) {
  const int a = Connect(gateway_->port());
  ASSERT_GE(a, 0);
  SendAll(a, Update(Body("head", "tensors")));
  ASSERT_TRUE(top_.WaitAdmits(1));
  close(a);
  // The loop has not seen the close (it stopped reading); the next connection is served.
  const int b = Connect(gateway_->port());
  SendAll(b, kHealthzRequest);
  EXPECT_EQ(Receive(b, 1, 10000).rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);  // nothing held while the top decides
  top_.Answer(FlAdmission{42, 0.5f});
  // The admission comes back through the loop; the connection is found gone as its body is
  // read: the ticket is failed, no buffer is left.
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard lock(top_.mu);
      if (!top_.completed.empty()) break;
    }
    SendAll(b, kHealthzRequest);
    EXPECT_EQ(Receive(b, 1, 10000).rfind("HTTP/1.1 200 OK", 0), 0u);
  }
  {
    std::lock_guard lock(top_.mu);
    ASSERT_EQ(top_.completed.size(), 1u);
    EXPECT_EQ(top_.completed[0], std::make_pair(uint64_t{42}, 503));
  }
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
  close(b);
}

}  // namespace
}  // namespace shoal
