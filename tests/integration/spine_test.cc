// The spine end to end: a real shoald, real instances, real sockets, real BPF (as root).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tests/support/bpf_capability.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/shoald_fixture.h"

namespace shoal::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char d[32];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[d[i] >> 4];
    out += hex[d[i] & 15];
  }
  return out + "\n";
}

std::string FunctionManifest(const std::string& name, const std::string& handler_yaml,
                             const std::string& extra_spec = {}) {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
         "\nspec:\n  handler:\n" + handler_yaml + extra_spec;
}

std::string Builtin(const std::string& name) { return "    builtin: " + name + "\n"; }

class SpineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = ShoaldShortOfHugepages(options_.pool_bytes); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(shoald_.Start(options_)) << shoald_.Log();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  // Deploys function `name` (`handler`, `spec` under spec) and waits for its first instance.
  void DeployReady(const std::string& name, const std::string& handler, const std::string& spec) {
    auto d = shoald_.Deploy(FunctionManifest(name, handler, spec));
    ASSERT_EQ(d.exit_code, 0) << d.err;
    ASSERT_TRUE(shoald_.WaitReady(name, 1));
  }
  Shoald::Options options_;
  Shoald shoald_;
};

TEST_F(SpineTest, EchoBodiesFromZeroTo64MiBComeBackByteForByte) {
  ASSERT_NO_FATAL_FAILURE(
      DeployReady("echo", Builtin("echo"), "  concurrency: 4\n  scale: {min: 1, max: 2}\n"));
  const size_t sizes[] = {0, 1, 63, 64, 4095, 65536, 65537, 1 << 20, (16 << 20) + 3, 64 << 20};
  for (size_t n : sizes) {
    const std::string body = RandomBytes(n, static_cast<uint32_t>(n));
    auto r = Http(shoald_.port(), "POST", "/fn/echo", body, {"Content-Type: application/x-test"});
    ASSERT_EQ(r.status, 200) << "size " << n << " " << r.error << " " << r.body.substr(0, 200);
    EXPECT_EQ(r.headers["content-type"], "application/x-test");
    EXPECT_EQ(r.body.size(), n);
    EXPECT_TRUE(r.body == body) << "bytes differ for size " << n;
  }
  // Chunked request bodies (unknown length, growing buffer).
  for (size_t n : {size_t{1}, size_t{100000}, size_t{3 << 20}}) {
    const std::string body = RandomBytes(n, 7);
    auto r = Http(shoald_.port(), "POST", "/fn/echo/sub?x=1", body, {}, 8191);
    ASSERT_EQ(r.status, 200) << r.error;
    EXPECT_TRUE(r.body == body) << "chunked size " << n;
  }
  // Every buffer went back to the pool.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(shoald_.Metric("shoal_pool_bytes", "state=\"used\""), 0);
  // A built-in handler's instances are forked from its zygote, none spawned.
  EXPECT_GE(shoald_.Metric("shoal_instance_starts_total", "function=\"echo\",path=\"zygote\""), 1);
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"echo\",path=\"spawn\""), 0)
      << shoald_.Log();
}

TEST_F(SpineTest, Sha256AndWordcountDoRealWork) {
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("sha", Builtin("sha256"))).exit_code, 0);
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("wc", Builtin("wordcount"))).exit_code, 0);
  const std::string body = RandomBytes(5 << 20, 42);
  auto r = Http(shoald_.port(), "POST", "/fn/sha", body);  // scales from zero
  ASSERT_EQ(r.status, 200) << r.error << r.body;
  EXPECT_EQ(r.body, Sha256Hex(body));
  auto w = Http(shoald_.port(), "POST", "/fn/wc", "one two  three\nfour\n");
  ASSERT_EQ(w.status, 200);
  EXPECT_EQ(w.body, "{\"bytes\":20,\"words\":4,\"lines\":2}\n");
  EXPECT_EQ(w.headers["content-type"], "application/json");
}

TEST_F(SpineTest, UserHandlerFromSharedLibrary) {
  const std::string lib = LibDir() + "/shoal/handlers/libshoal-reverse.so";
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("rev", "    library: " + lib + "\n")).exit_code, 0);
  auto r = Http(shoald_.port(), "POST", "/fn/rev", "stressed");
  ASSERT_EQ(r.status, 200) << r.error << r.body;
  EXPECT_EQ(r.body, "desserts");
  auto e = Http(shoald_.port(), "POST", "/fn/rev", "");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.body, "{\"error\":\"reverse: empty body\"}\n");
}

TEST_F(SpineTest, ErrorsAreJsonWithTheRightStatus) {
  auto nf = Http(shoald_.port(), "GET", "/fn/missing");
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.body, "{\"error\":\"function 'missing' not found\"}\n");
  ASSERT_EQ(
      shoald_.Deploy(FunctionManifest("small", Builtin("echo"), "  maxBodySize: 1Ki\n")).exit_code,
      0);
  auto big = Http(shoald_.port(), "POST", "/fn/small", std::string(2000, 'x'));
  EXPECT_EQ(big.status, 413);
  EXPECT_NE(big.body.find("over the limit of 1024 bytes"), std::string::npos) << big.body;
  auto ok = Http(shoald_.port(), "POST", "/fn/small", std::string(1024, 'x'));
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_EQ(ok.body.size(), 1024u);

  ASSERT_EQ(
      shoald_.Deploy(FunctionManifest("slow", Builtin("sleep"), "  timeout: 300ms\n")).exit_code,
      0);
  auto t = Http(shoald_.port(), "GET", "/fn/slow?ms=2000");
  EXPECT_EQ(t.status, 504);
  EXPECT_NE(t.body.find("did not answer within 0.3 s"), std::string::npos) << t.body;
  auto bad = Http(shoald_.port(), "GET", "/fn/slow?ms=abc");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("sleep: give the duration"), std::string::npos);
  EXPECT_EQ(Http(shoald_.port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(Http(shoald_.port(), "GET", "/nowhere").status, 404);
}

TEST_F(SpineTest, KilledInstanceGives502ComesBackAndReturnsItsBuffers) {
  ASSERT_NO_FATAL_FAILURE(
      DeployReady("victim", Builtin("sleep"), "  scale: {min: 1, max: 1}\n  concurrency: 2\n"));
  const double used_before = shoald_.Metric("shoal_pool_bytes", "state=\"used\"");
  auto pids = shoald_.InstancePids("victim");
  ASSERT_EQ(pids.size(), 1u);
  HttpResult slow;
  std::thread client([&] {
    slow = Http(shoald_.port(), "POST", "/fn/victim?ms=5000", std::string(1 << 20, 'z'));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the request is running
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);
  client.join();
  EXPECT_EQ(slow.status, 502) << slow.error << slow.body;
  EXPECT_NE(slow.body.find("crashed (killed by signal 9)"), std::string::npos) << slow.body;
  // The instance comes back and serves.
  ASSERT_TRUE(shoald_.WaitReady("victim", 1));
  auto again = Http(shoald_.port(), "GET", "/fn/victim?ms=1");
  EXPECT_EQ(again.status, 200) << again.error << again.body;
  EXPECT_EQ(again.body, "slept 1 ms\n");
  EXPECT_NE(shoald_.InstancePids("victim")[0], pids[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(shoald_.Metric("shoal_pool_bytes", "state=\"used\""), used_before);
  EXPECT_NE(shoald_.Log().find("reclaimed 1 buffer(s)"), std::string::npos);
}

TEST_F(SpineTest, QueuedRequestsWaitForAFreeInstance) {
  ASSERT_EQ(shoald_
                .Deploy(FunctionManifest("one", Builtin("sleep"),
                                         "  concurrency: 1\n  scale: {min: 0, max: 1}\n"))
                .exit_code,
            0);
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  std::vector<HttpResult> results(4);
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] { results[i] = Http(shoald_.port(), "GET", "/fn/one?ms=200"); });
  }
  for (auto& t : clients) t.join();
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 200) << r.error << r.body;
    EXPECT_EQ(r.body, "slept 200 ms\n");
  }
  // One instance, one request at a time: the four ran one after another.
  EXPECT_GE(elapsed.count(), 800);
  auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/one").body);
  EXPECT_EQ(j["status"]["cold_starts"].get<int>(), 1);
  EXPECT_EQ(j["status"]["requests_total"].get<int>(), 4);
}

TEST_F(SpineTest, IdleInstancesStopAfterKeepAliveAndScaleFromZeroAgain) {
  ASSERT_EQ(shoald_
                .Deploy(FunctionManifest("blink", Builtin("echo"),
                                         "  keepAlive: 500ms\n  scale: {min: 0, max: 1}\n"))
                .exit_code,
            0);
  auto r = Http(shoald_.port(), "POST", "/fn/blink", "a");
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(shoald_.WaitReady("blink", 1));
  ASSERT_TRUE(shoald_.WaitReady("blink", 0, 5000)) << "the idle instance did not stop";
  // Not ready any more is not yet gone: wait for the process to exit (slow under ASan).
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = shoald_.InstancePids("blink").empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the stopped instance is still listed";
  auto again = Http(shoald_.port(), "POST", "/fn/blink", "b");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body, "b");
  auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/blink").body);
  EXPECT_EQ(j["status"]["cold_starts"].get<int>(), 2);
}

TEST_F(SpineTest, DeploymentsSurviveARestart) {
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("keep", Builtin("echo"))).exit_code, 0);
  EXPECT_EQ(shoald_.Stop(), 0);
  ASSERT_TRUE(shoald_.Start(options_)) << shoald_.Log();
  auto list = shoald_.Cli({"get", "-o", "json"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("\"keep\""), std::string::npos) << list.out;
  auto r = Http(shoald_.port(), "POST", "/fn/keep", "still here");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "still here");
}

TEST_F(SpineTest, BadManifestsNameTheFieldAndDeployNothing) {
  auto r = shoald_.Deploy(FunctionManifest("bad", Builtin("echo"), "  scale: {min: 3, max: 1}\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("spec.scale.max"), std::string::npos) << r.err;
  auto u = shoald_.Deploy(FunctionManifest("bad2", Builtin("nonesuch")));
  EXPECT_EQ(u.exit_code, 1);
  EXPECT_NE(u.err.find("spec.handler.builtin"), std::string::npos) << u.err;
  auto list = shoald_.Api("GET", "/v1/functions");
  EXPECT_EQ(list.status, 200);
  auto j = nlohmann::json::parse(list.body);
  EXPECT_TRUE(j["functions"].empty()) << list.body;
}

TEST_F(SpineTest, DataPlaneIsSockmapWhenRoot) {
  // Skip only where the capability is absent; with it, shoald falling back to the unix data
  // plane (a verifier regression, a broken skeleton) fails here, with shoald's reason.
  if (const std::string absent = bpf_test::BpfCapabilityAbsent(); !absent.empty()) {
    GTEST_SKIP() << "BPF is not available here: " << absent;
  }
  const std::string log = shoald_.Log();
  if (auto pos = log.find("data plane: unix (auto fallback), "); pos != std::string::npos) {
    FAIL() << "shoald could not load BPF with the capability present: "
           << log.substr(pos, log.find('\n', pos) - pos);
  }
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("counted", Builtin("echo"))).exit_code, 0);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(Http(shoald_.port(), "POST", "/fn/counted", std::string(100, 'c')).status, 200);
  }
  EXPECT_EQ(shoald_.Metric("shoal_dataplane_mode", "mode=\"sockmap\""), 1);
  // 10 requests, 10 responses and the instance's "ready" went through the sk_msg program;
  // each request descriptor named 64 bytes of payload head plus the 100-byte body.
  EXPECT_EQ(shoald_.Metric("shoal_dataplane_events", "function=\"counted\""), 21);
  EXPECT_EQ(shoald_.Metric("shoal_dataplane_payload_bytes", "function=\"counted\""), 1640);
  EXPECT_EQ(shoald_.Metric("shoal_dataplane_inflight", "function=\"counted\""), 0);
  EXPECT_NE(shoald_.Log().find("data plane: sockmap"), std::string::npos);
  auto node = nlohmann::json::parse(shoald_.Api("GET", "/v1/node").body);
  EXPECT_EQ(node["dataplane"], "sockmap");
}

class SmallPoolTest : public SpineTest {
 protected:
  SmallPoolTest() {
    options_.pool_bytes = 32ull << 20;
    options_.max_body_bytes = 20ull << 20;
  }
};

TEST_F(SmallPoolTest, FullPoolAnswers503WithRetryAfterAndLosesNothingAccepted) {
  ASSERT_NO_FATAL_FAILURE(
      DeployReady("hold", Builtin("sleep"), "  concurrency: 4\n  scale: {min: 1, max: 1}\n"));
  HttpResult first;
  std::thread holder([&] {
    first = Http(shoald_.port(), "POST", "/fn/hold?ms=1500", std::string(18 << 20, 'h'));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto second = Http(shoald_.port(), "POST", "/fn/hold?ms=1", std::string(18 << 20, 'i'));
  EXPECT_EQ(second.status, 503) << second.error << second.body;
  EXPECT_EQ(second.headers["retry-after"], "1");
  EXPECT_NE(second.body.find("is full"), std::string::npos) << second.body;
  holder.join();
  EXPECT_EQ(first.status, 200) << first.error << first.body;  // the accepted one completed
  auto retry = Http(shoald_.port(), "POST", "/fn/hold?ms=1", std::string(18 << 20, 'i'));
  EXPECT_EQ(retry.status, 200) << retry.error << retry.body;
}

class UnixDataPlaneTest : public SpineTest {
 protected:
  UnixDataPlaneTest() { options_.dataplane = "unix"; }
};

TEST_F(UnixDataPlaneTest, FallbackCarriesTheSameRequests) {
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("echo", Builtin("echo"))).exit_code, 0);
  const std::string body = RandomBytes(3 << 20, 3);
  auto r = Http(shoald_.port(), "POST", "/fn/echo", body);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_TRUE(r.body == body);
  EXPECT_EQ(shoald_.Metric("shoal_dataplane_mode", "mode=\"unix\""), 1);
}

}  // namespace
}  // namespace shoal::testing

namespace shoal::testing {
namespace {

TEST_F(SpineTest, CliShowsLiveStateLogsAndDeletes) {
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("echo", Builtin("echo"), "  scale: {min: 1, max: 2}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(shoald_.WaitReady("echo", 1));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Http(shoald_.port(), "POST", "/fn/echo", "x").status, 200);
  auto inv = shoald_.Cli({"invoke", "echo", "-d", "via cli"});
  EXPECT_EQ(inv.exit_code, 0);
  EXPECT_EQ(inv.out, "via cli");
  auto top = shoald_.Cli({"top"});
  EXPECT_EQ(top.exit_code, 0);
  const bool bpf = bpf_test::BpfCapabilityAbsent().empty();
  EXPECT_NE(top.out.find("Data plane: " + std::string(bpf ? "sockmap" : "unix")), std::string::npos)
      << top.out;
  EXPECT_NE(top.out.find("echo"), std::string::npos);
  auto desc = shoald_.Cli({"describe", "echo"});
  EXPECT_EQ(desc.exit_code, 0);
  EXPECT_NE(desc.out.find("ready"), std::string::npos) << desc.out;
  auto logs = shoald_.Cli({"logs", "echo"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_NE(logs.out.find("ready: function echo"), std::string::npos) << logs.out;
  const auto pids = shoald_.InstancePids("echo");
  ASSERT_EQ(pids.size(), 1u);
  auto del = shoald_.Cli({"delete", "echo"});
  EXPECT_EQ(del.exit_code, 0);
  EXPECT_EQ(Http(shoald_.port(), "POST", "/fn/echo", "x").status, 404);
  // Its instance is stopped.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = kill(pids[0], 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "instance " << pids[0] << " still running after delete";
  auto missing = shoald_.Cli({"describe", "echo"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("function 'echo' not found"), std::string::npos) << missing.err;
}

TEST_F(SpineTest, RedeployReplacesInstancesWithoutFailingRequests) {
  ASSERT_EQ(shoald_.Deploy(FunctionManifest("svc", Builtin("sleep"), "  scale: {min: 1, max: 1}\n"))
                .exit_code,
            0);
  ASSERT_TRUE(shoald_.WaitReady("svc", 1));
  const auto old_pids = shoald_.InstancePids("svc");
  HttpResult inflight;
  std::thread t([&] { inflight = Http(shoald_.port(), "GET", "/fn/svc?ms=400"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto re = shoald_.Deploy(
      FunctionManifest("svc", Builtin("sleep"), "  scale: {min: 1, max: 1}\n  concurrency: 2\n"));
  EXPECT_EQ(re.exit_code, 0);
  EXPECT_NE(re.out.find("function/svc configured"), std::string::npos) << re.out;
  t.join();
  EXPECT_EQ(inflight.status, 200) << inflight.error << inflight.body;  // finished on the old one
  auto after = Http(shoald_.port(), "GET", "/fn/svc?ms=1");
  EXPECT_EQ(after.status, 200) << after.body;
  ASSERT_TRUE(shoald_.WaitReady("svc", 1));
  const auto new_pids = shoald_.InstancePids("svc");
  ASSERT_EQ(new_pids.size(), 1u);
  EXPECT_NE(new_pids[0], old_pids[0]);
  auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/svc").body);
  EXPECT_EQ(j["generation"].get<int>(), 2);
  EXPECT_EQ(j["concurrency"].get<int>(), 2);
}

TEST_F(SpineTest, EachTenantHasItsOwnPrivatePool) {
  ASSERT_EQ(shoald_
                .Deploy("apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: a\n"
                        "  namespace: team-a\nspec:\n  handler:\n    builtin: echo\n")
                .exit_code,
            0);
  ASSERT_EQ(Http(shoald_.port(), "POST", "/fn/a", "tenant a").body, "tenant a");
  // Where the backend under test keeps the pool (the DPDK variant: shoald's hugetlbfs mount).
  const bool dpdk = TestPoolBackend() == "dpdk";
  const std::string seg =
      (dpdk ? "/dev/hugepages/shoal." : "/dev/shm/shoal.") + shoald_.node() + ".team-a";
  if (dpdk) {
    EXPECT_EQ(shoald_.Metric("shoal_pool_backend", "backend=\"dpdk\""), 1);
  }
  struct stat st {};
  ASSERT_EQ(stat(seg.c_str(), &st), 0) << seg;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(shoald_.Metric("shoal_pool_bytes", "tenant=\"team-a\""),
            shoald_.Metric("shoal_pool_bytes", "state=\"free\",tenant=\"team-a\""));
  // The pools and the BPF pins go away with shoald.
  const std::string pins = "/sys/fs/bpf/shoal-it/" + shoald_.node();
  if (bpf_test::BpfCapabilityAbsent().empty()) {
    EXPECT_EQ(access(pins.c_str(), F_OK), 0) << pins;
  }
  EXPECT_EQ(shoald_.Stop(), 0);
  EXPECT_NE(access(seg.c_str(), F_OK), 0) << seg << " left behind";
  EXPECT_NE(access(pins.c_str(), F_OK), 0) << pins << " left behind";
}

}  // namespace
}  // namespace shoal::testing
