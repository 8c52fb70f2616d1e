// The compromise detector end to end, on a real shoald as root with the behaviour probes in the
// kernel: a function's instance learns its baseline from normal requests, then the test handler
// (handlers/attack_handler.c) spawns a shell, connects to an unexpected loopback port, opens
// files outside its allowed paths (itself and from a forked child) and burns CPU. Each is
// detected with its kind within two scoring intervals (plus the test's polling), counted on
// /metrics, shown by `shoal describe`; normal requests meanwhile all succeed and raise no alarm.
// The default mode (detect_syscalls: sampled) sees the opens through fanotify and a refused
// open only in a sys_enter slice; detect_syscalls: true sees a refused open at once; false sees
// no open. With security.onAnomaly: quarantine the instance stops taking requests, is frozen,
// and a clean instance serves.
// Skips (saying why) only where BPF is absent (bpf_capability.h) or shoald is not root.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/bpf_capability.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/loopback.h"
#include "tests/support/sandbox_test_util.h"
#include "tests/support/shoald_fixture.h"
#include "tests/support/temp_dir.h"

namespace shoal::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kIntervalMs = 500;
constexpr int kLearnIntervals = 4;
// How soon an attack must be detected: two intervals, plus the polling and a loaded 2-core
// machine's timer lag.
constexpr double kDetectBoundS = 2 * kIntervalMs / 1e3 + 1.0;
// Requests each client sends at least in one burst of the no-alarm tests (and for at least
// 1.5 s): the scored traffic is a count, whatever the machine's speed.
constexpr int kMinPerBurst = 12;

// An attack the handler runs on `command`, the anomaly kind it must raise and its reply.
struct Attack {
  std::string command, kind, reply;
};

class DetectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "not root: shoald cannot load the behaviour probes";
    if (const std::string absent = bpf_test::BpfCapabilityAbsent(); !absent.empty()) {
      GTEST_SKIP() << "BPF is not available here: " << absent;
    }
    if (auto why = ShoaldShortOfHugepages(64ull << 20, 3); !why.empty()) GTEST_SKIP() << why;
    handlers_ = shoal::testing::MakeTempDir("shoal-detect-handlers", 0755);
    library_ = handlers_ + "/libattack.so";
    fs::copy_file(LibDir() + "/shoal/handlers/libshoal-attack.so", library_);
    chmod(library_.c_str(), 0644);
    ASSERT_TRUE(shoald_.Start(ShoaldOptions("restart_backoff_s: 0.05\n"))) << shoald_.Log();
    ASSERT_NE(shoald_.Log().find("detector: behaviour probes loaded"), std::string::npos)
        << shoald_.Log();
  }
  // shoald's options: the attack handler's folder, `yaml`, and the detector's interval and
  // learning period.
  Shoald::Options ShoaldOptions(const std::string& yaml) const {
    Shoald::Options o;
    o.pool_bytes = 64ull << 20;
    o.max_body_bytes = 1ull << 20;
    o.extra_yaml = "handler_dirs: [" + handlers_ + "]\n" + yaml +
                   "detect_interval_ms: " + std::to_string(kIntervalMs) + "\n" +
                   "detect_learn_intervals: " + std::to_string(kLearnIntervals) + "\n";
    return o;
  }
  void TearDown() override {
    StopTraffic();
    if (listen_fd_ >= 0) close(listen_fd_);
    if (!handlers_.empty()) (void)!system(("rm -rf '" + handlers_ + "'").c_str());
  }

  void Deploy(const std::string& name, const std::string& security) {
    const std::string manifest =
        "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: " + name +
        "}\nspec:\n  handler:\n    library: " + library_ +
        "\n  scale: {min: 1, max: 1}\n  security:\n" + security;
    auto r = shoald_.Api("POST", "/v1/functions", manifest, {"Content-Type: application/yaml"});
    ASSERT_TRUE(r.status == 201 || r.status == 200) << r.status << " " << r.body;  // 200: re-deploy
    ASSERT_TRUE(shoald_.WaitReady(name, 1)) << shoald_.Log();
  }
  HttpResult Invoke(const std::string& fn, const std::string& body) {
    return Http(shoald_.port(), "POST", "/fn/" + fn, body, {}, 0, 20000);
  }
  json Status(const std::string& fn) {
    auto r = shoald_.Api("GET", "/v1/functions/" + fn);
    auto j = json::parse(r.body, nullptr, false);
    return j.is_discarded() ? json::object() : j.value("status", json::object());
  }
  std::string DetectorState(const std::string& fn) {
    return Status(fn).value("detector", json::object()).value("state", "");
  }
  double Anomalies(const std::string& fn, const std::string& kind = {}) {
    std::string filter = "function=\"" + fn + "\"";
    if (!kind.empty()) filter += ",kind=\"" + kind + "\"";
    return shoald_.Metric("shoal_function_anomalies_total", filter);
  }
  // Normal requests ("ok") every 10 ms from a thread until StopTraffic; counts failures.
  void StartTraffic(const std::string& fn) {
    traffic_on_ = true;
    traffic_ = std::thread([this, fn] {
      while (traffic_on_) {
        auto r = Invoke(fn, "ok");
        ++sent_;
        if (r.status != 200 || r.body != "ok") {
          ++failed_;
          last_failure_ = std::to_string(r.status) + " " + r.body + " " + r.error;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  void StopTraffic() {
    traffic_on_ = false;
    if (traffic_.joinable()) traffic_.join();
  }
  // Waits until the function's baseline is learned (the detector says "scoring").
  void WaitScoring(const std::string& fn) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (DetectorState(fn).rfind("scoring", 0) != 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(DetectorState(fn).rfind("scoring (baseline of " + std::to_string(kLearnIntervals), 0),
              0u)
        << DetectorState(fn) << "\n"
        << shoald_.Log();
  }
  // Restarts shoald with `yaml` added to the fixture's config (the detect_* keys).
  void Restart(const std::string& yaml) {
    ASSERT_EQ(shoald_.Stop(), 0);
    ASSERT_TRUE(shoald_.Start(ShoaldOptions(yaml))) << shoald_.Log();
  }
  // Restarts shoald with detect_syscalls `mode` (its start-up line names `probes`, and no
  // fanotify), deploys `fn` with onAnomaly: alert and has it learn under traffic until scored.
  void RestartAndScore(const std::string& mode, const std::string& probes, const std::string& fn) {
    Restart("detect_syscalls: " + mode + "\n");
    EXPECT_NE(LogSinceStart().find(probes), std::string::npos);
    EXPECT_EQ(LogSinceStart().find("fanotify"), std::string::npos) << LogSinceStart();
    Deploy(fn, "    onAnomaly: alert\n");
    StartTraffic(fn);
    WaitScoring(fn);
  }
  // The log of the running shoald only (Restart's, not the fixture's first).
  std::string LogSinceStart() {
    const std::string log = shoald_.Log();
    const size_t at = log.rfind("starting: node");
    return at == std::string::npos ? log : log.substr(at);
  }
  // Sends the attack and returns how long until anomalies of `kind` rose (-1: not in 10 s).
  double Detect(const std::string& fn, const std::string& command, const std::string& kind,
                const std::string& expect_reply) {
    const double before = Anomalies(fn, kind);
    auto r = Invoke(fn, command);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, expect_reply);
    const auto sent = Clock::now();
    while (Clock::now() - sent < std::chrono::seconds(10)) {
      if (Anomalies(fn, kind) > before) {
        return std::chrono::duration<double>(Clock::now() - sent).count();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  // The two attacks every mode detects, a shell and a connect to a loopback port nobody told the
  // function about (listening until TearDown), followed by `more`.
  std::vector<Attack> ShellAndConnectThen(std::vector<Attack> more) {
    if (listen_fd_ < 0) listen_fd_ = ListenLoopback(8, &port_);
    EXPECT_GE(listen_fd_, 0) << "no loopback listener for the connect attack";
    std::vector<Attack> attacks = {{"shell", "exec", "spawned"},
                                   {"connect " + std::to_string(port_), "connect", "connected"}};
    attacks.insert(attacks.end(), more.begin(), more.end());
    return attacks;
  }
  // Sends each attack to `fn` in turn; each must be detected as its kind within kDetectBoundS.
  void ExpectEachDetected(const std::string& fn, const std::vector<Attack>& attacks) {
    for (const auto& a : attacks) {
      const double latency = Detect(fn, a.command, a.kind, a.reply);
      EXPECT_GE(latency, 0) << a.command << " was not detected as " << a.kind << "\n"
                            << shoald_.Log();
      EXPECT_LE(latency, kDetectBoundS) << a.command;
      std::printf("detected %-24s as %-8s in %.2f s\n", a.command.c_str(), a.kind.c_str(), latency);
    }
  }

  Shoald shoald_;
  std::string handlers_;
  std::string library_;
  std::thread traffic_;
  std::atomic<bool> traffic_on_{false};
  std::atomic<int> sent_{0}, failed_{0};
  std::string last_failure_;
  int listen_fd_ = -1;  // ShellAndConnectThen's listener, on port_
  uint16_t port_ = 0;
};

// The default mode (detect_syscalls: sampled): no syscall hook but for a slice of each interval.
TEST_F(DetectTest, EachAttackIsDetectedWithItsKindAndNormalTrafficRaisesNone) {
  const std::string log0 = shoald_.Log();
  ASSERT_NE(log0.find("sys_enter for 10 % of each interval (detect_syscalls: sampled"),
            std::string::npos)
      << log0;
  ASSERT_NE(log0.find("detector: opens watched through fanotify (filesystems of "),
            std::string::npos)
      << log0;
  Deploy("victim", "    onAnomaly: alert\n");
  EXPECT_EQ(DetectorState("victim").rfind("learning (", 0), 0u) << DetectorState("victim");
  StartTraffic("victim");
  WaitScoring("victim");
  // Normal traffic over the learning period and four more scoring intervals: no alarm.
  std::this_thread::sleep_for(std::chrono::milliseconds(4 * kIntervalMs));
  EXPECT_EQ(Anomalies("victim"), 0) << shoald_.Log();
  // The sampled slices counted syscalls: the learned network syscalls per request are not 0.
  const std::string profile = ReadAll(shoald_.state_dir() + "/state/detect/victim.g1.profile");
  const size_t net = profile.find("feature syscalls_net ");
  ASSERT_NE(net, std::string::npos) << profile;
  EXPECT_GT(std::stod(profile.substr(net + 21)), 0.5) << profile;

  ExpectEachDetected("victim",
                     ShellAndConnectThen({
                         {"open /etc/passwd", "file", "opened"},                // fanotify
                         {"child-open /etc/hostname", "file", "child opened"},  // another pid
                         {"burn 2500", "cpu", "burning"},
                     }));
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // the burn ends
  // A refused open makes no fanotify event: it is seen when it falls in a sys_enter slice.
  // Tried every 20 ms (a brute force), it is found within a few intervals.
  const double before = Anomalies("victim", "file");
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  int tries = 0;
  while (Anomalies("victim", "file") == before && Clock::now() < give_up) {
    EXPECT_EQ(Invoke("victim", "open /etc/shadow").body, "Permission denied");
    ++tries;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Anomalies("victim", "file"), before + 1) << "after " << tries << " tries\n"
                                                     << shoald_.Log();
  StopTraffic();
  // Exactly these, one of each (the burn is one episode however many intervals it lasts).
  EXPECT_EQ(Anomalies("victim"), 6) << shoald_.Log();
  for (const char* kind : {"exec", "connect", "cpu"})
    EXPECT_EQ(Anomalies("victim", kind), 1) << kind;
  EXPECT_EQ(Anomalies("victim", "file"), 3);
  // fanotify read the node's opens (the instance's among them) and lost none.
  EXPECT_GE(shoald_.Metric("shoal_detector_fanotify_opens_total"), 2);
  EXPECT_EQ(shoald_.Metric("shoal_detector_fanotify_overflows_total"), 0);
  EXPECT_EQ(failed_.load(), 0) << last_failure_;
  EXPECT_GT(sent_.load(), 100);

  // The evidence: in the log, in describe, and the instance keeps serving (alert only).
  const std::string log = shoald_.Log();
  EXPECT_NE(log.find("anomaly exec: execve /bin/sh (never seen while learning); alert only"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("anomaly connect: connect to 127.0.0.1:" + std::to_string(port_)),
            std::string::npos);
  EXPECT_NE(log.find("anomaly file: open /etc/passwd (outside the allowed paths"),
            std::string::npos);
  EXPECT_NE(log.find("anomaly file: open /etc/hostname (outside the allowed paths"),
            std::string::npos);
  EXPECT_NE(log.find("anomaly file: open /etc/shadow (outside the allowed paths"),
            std::string::npos);
  EXPECT_NE(log.find("anomaly cpu: cpu: "), std::string::npos);
  auto d = shoald_.Cli({"describe", "victim"});
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("Detector:    scoring (baseline of 4 intervals"), std::string::npos)
      << d.out;
  EXPECT_NE(d.out.find("on anomaly: alert; 6 anomalies"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("exec  alerted: execve /bin/sh"), std::string::npos) << d.out;
  auto top = shoald_.Cli({"top"});
  EXPECT_NE(top.out.find("ANOMALIES"), std::string::npos) << top.out;
  EXPECT_EQ(Invoke("victim", "ok").body, "ok");
  // The profile was saved for the next shoald.
  EXPECT_TRUE(fs::exists(shoald_.state_dir() + "/state/detect/victim.g1.profile")) << shoald_.Log();
}

// detect_syscalls: true (sys_enter attached all the time): a refused open is caught at once,
// and the four attacks as in the default mode.
TEST_F(DetectTest, WithTheSyscallProbeAlwaysOnARefusedOpenIsCaughtAtOnce) {
  RestartAndScore("true", "sys_enter (detect_syscalls: true", "strict");
  ExpectEachDetected("strict",
                     ShellAndConnectThen({{"open /etc/shadow", "file", "Permission denied"},
                                          {"burn 1500", "cpu", "burning"}}));
  StopTraffic();
  EXPECT_EQ(failed_.load(), 0) << last_failure_;
  EXPECT_EQ(Anomalies("strict"), 4) << shoald_.Log();
  EXPECT_NE(shoald_.Log().find("anomaly file: open /etc/shadow (outside the allowed paths"),
            std::string::npos);
}

TEST_F(DetectTest, QuarantineStopsRoutingFreezesTheInstanceAndACleanOneServes) {
  Deploy("suspect", "    onAnomaly: quarantine\n");
  const std::vector<int> pids = shoald_.InstancePids("suspect");
  ASSERT_EQ(pids.size(), 1u);
  const int bad = pids[0];
  StartTraffic("suspect");
  WaitScoring("suspect");
  StopTraffic();
  ASSERT_EQ(failed_.load(), 0) << last_failure_;

  // The trigger request itself is answered; the anomaly quarantines its instance.
  const double latency = Detect("suspect", "shell", "exec", "spawned");
  ASSERT_GE(latency, 0) << shoald_.Log();
  json quarantined;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  int clean = 0;
  while (Clock::now() < deadline && (quarantined.is_null() || clean == 0)) {
    quarantined = nullptr;
    clean = 0;
    for (const auto& i : Status("suspect").value("instances", json::array())) {
      if (i.value("state", "") == "quarantined") quarantined = i;
      if (i.value("state", "") == "ready") clean = i.value("pid", 0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(quarantined.is_null()) << Status("suspect").dump() << shoald_.Log();
  EXPECT_EQ(quarantined.value("pid", 0), bad);
  ASSERT_NE(clean, 0) << Status("suspect").dump();
  EXPECT_NE(clean, bad);
  // Frozen, in the freezer the quarantine names.
  const std::string why = quarantined.value("quarantine", "");
  EXPECT_EQ(why.rfind("anomaly exec: execve /bin/sh (never seen while learning); frozen in ", 0),
            0u)
      << why;
  const std::string dir = why.substr(why.find("frozen in ") + 10);
  if (fs::exists(dir + "/freezer.state")) {
    EXPECT_EQ(ReadAll(dir + "/freezer.state"), "FROZEN\n");
  } else {
    EXPECT_NE(ReadAll(dir + "/cgroup.events").find("frozen 1"), std::string::npos) << dir;
  }
  EXPECT_EQ(kill(bad, 0), 0);  // alive, for inspection
  // Every request now goes to the clean instance.
  for (int i = 0; i < 20; ++i) {
    auto r = Invoke("suspect", "pid");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, std::to_string(clean));
  }
  auto d = shoald_.Cli({"describe", "suspect"});
  EXPECT_NE(d.out.find("exec  quarantined: execve /bin/sh"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("quarantined: anomaly exec: execve /bin/sh"), std::string::npos) << d.out;
  EXPECT_NE(shoald_.Log().find("quarantined: anomaly exec: execve /bin/sh"), std::string::npos);
  // Deleting the function kills the frozen instance too.
  auto del = shoald_.Cli({"delete", "suspect"});
  EXPECT_EQ(del.exit_code, 0) << del.err;
  const auto gone = Clock::now() + std::chrono::seconds(10);
  while (kill(bad, 0) == 0 && Clock::now() < gone) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(kill(bad, 0), 0) << "the quarantined instance outlived its function";
  // Its freezer cgroup goes once shoald has reaped it (a moment after the pid is gone).
  auto frozen_dir_left = [&] { return fs::exists(dir) && fs::exists(dir + "/freezer.state"); };
  const auto removed = Clock::now() + std::chrono::seconds(10);
  while (frozen_dir_left() && Clock::now() < removed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(frozen_dir_left()) << dir;
}

// A learned baseline is saved and read back by the next shoald (scored from the first
// interval); a re-deploy is new code: it learns anew, and the old generation's profile goes.
TEST_F(DetectTest, ProfileSurvivesARestartAndARedeployLearnsAnew) {
  Deploy("kept", "    onAnomaly: alert\n");
  StartTraffic("kept");
  WaitScoring("kept");
  StopTraffic();
  const std::string profile = shoald_.state_dir() + "/state/detect/kept.g1.profile";
  ASSERT_TRUE(fs::exists(profile)) << shoald_.Log();
  EXPECT_EQ(ReadAll(profile).rfind("shoal-detect-profile v1\nintervals 4\n", 0), 0u);
  ASSERT_EQ(shoald_.Stop(), 0);
  Shoald::Options o;
  o.pool_bytes = 64ull << 20;
  o.max_body_bytes = 1ull << 20;
  o.extra_yaml = "handler_dirs: [" + handlers_ +
                 "]\ndetect_interval_ms: " + std::to_string(kIntervalMs) +
                 "\ndetect_learn_intervals: 100\n";
  ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  ASSERT_TRUE(shoald_.WaitReady("kept", 1)) << shoald_.Log();
  EXPECT_EQ(DetectorState("kept"), "scoring (saved profile)");
  EXPECT_NE(shoald_.Log().find("detector: function kept: baseline read from " + profile),
            std::string::npos);
  EXPECT_GE(Detect("kept", "shell", "exec", "spawned"), 0) << shoald_.Log();
  // Re-deployed (generation 2): learning again (100 intervals now), the g1 profile removed once
  // g2 is saved (not in this test's time); the new code's shell is not judged by the old one.
  Deploy("kept", "    onAnomaly: alert\n    allowedPaths: [/srv/]\n");
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (DetectorState("kept").rfind("learning", 0) != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(DetectorState("kept").rfind("learning (", 0), 0u) << DetectorState("kept");
  EXPECT_NE(shoald_.Log().find("detector: function kept: generation 2 deployed: learning a new "
                               "baseline"),
            std::string::npos)
      << shoald_.Log();
}

// detect_syscalls: false (no syscall of the node pays for the probes): a shell and a TCP
// connect are still detected; an open is not seen (no sys_enter, no fanotify), and says so.
TEST_F(DetectTest, WithoutTheSyscallProbeShellAndConnectAreStillDetected) {
  RestartAndScore("false", "inet_sock_set_state (detect_syscalls: false", "lean");
  ExpectEachDetected("lean", ShellAndConnectThen({}));
  EXPECT_EQ(Detect("lean", "open /etc/passwd", "file", "opened"), -1);
  StopTraffic();
  EXPECT_EQ(failed_.load(), 0) << last_failure_;
  EXPECT_EQ(Anomalies("lean"), 2) << shoald_.Log();
}

TEST_F(DetectTest, BuiltinEchoUnderChangingLoadRaisesNoAlarm) {
  const std::string manifest =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: echo}\nspec:\n"
      "  handler: echo\n  scale: {min: 1, max: 2}\n";
  auto r = shoald_.Api("POST", "/v1/functions", manifest, {"Content-Type: application/yaml"});
  ASSERT_EQ(r.status, 201) << r.body;
  ASSERT_TRUE(shoald_.WaitReady("echo", 1)) << shoald_.Log();
  // Learn under light load, then score under bursts of 4 concurrent clients and idle gaps.
  StartTraffic("echo");
  WaitScoring("echo");
  StopTraffic();
  std::atomic<int> bad{0}, total{0};
  for (int phase = 0; phase < 4; ++phase) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c) {
      clients.emplace_back([&, c] {
        // A burst of at least 1.5 s and at least kMinPerBurst requests (a loaded machine
        // serves fewer in the time: the count, not the clock, bounds what is asserted).
        const auto until = Clock::now() + std::chrono::milliseconds(1500);
        std::string body(64 + 900 * c, 'x');
        for (int n = 0; n < kMinPerBurst || Clock::now() < until; ++n) {
          auto e = Invoke("echo", body);
          ++total;
          if (e.status != 200 || e.body != body) ++bad;
        }
      });
    }
    for (auto& t : clients) t.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // idle
  }
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(total.load(), 4 * 4 * kMinPerBurst);
  EXPECT_EQ(Anomalies("echo"), 0) << shoald_.Log();
  EXPECT_EQ(DetectorState("echo").rfind("scoring", 0), 0u);
}

// The inference handler (an ONNX CNN on the CPU executor: its batching thread and its OpenMP
// team) under normal load: it learns its baseline under light traffic, then is scored under
// bursts of concurrent clients and idle gaps, and raises no alarm.
TEST_F(DetectTest, InferenceUnderLoadRaisesNoAlarm) {
  const std::string dir = std::string(SHOAL_SOURCE_DIR) + "/tests/data/inference/";
  auto r = shoald_.Api("POST", "/v1/functions",
                       "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: cnn}\nspec:\n"
                       "  handler: inference\n  concurrency: 4\n  scale: {min: 1, max: 1}\n"
                       "  inference:\n    source: {onnx: " +
                           dir +
                           "cnn.onnx}\n    device: cpu\n"
                           "    maxBatchSize: 4\n",
                       {"Content-Type: application/yaml"});
  ASSERT_EQ(r.status, 201) << r.body;
  ASSERT_TRUE(shoald_.WaitReady("cnn", 1)) << shoald_.Log();
  auto meta_r = Http(shoald_.port(), "GET", "/v2/models/cnn");
  ASSERT_EQ(meta_r.status, 200) << meta_r.body;
  const json meta = json::parse(meta_r.body);
  std::ifstream f(dir + "cnn.input.bin", std::ios::binary);
  const std::string input((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(input.size(), 3u * 784 * 4);
  const std::string header =
      json{{"inputs",
            {{{"name", meta["inputs"][0]["name"]},
              {"shape", {3, 1, 28, 28}},
              {"datatype", "FP32"},
              {"parameters", {{"binary_data_size", input.size()}}}}}},
           {"outputs",
            {{{"name", meta["outputs"][0]["name"]}, {"parameters", {{"binary_data", true}}}}}}}
          .dump();
  std::atomic<int> bad{0}, total{0};
  auto infer = [&] {
    auto a = Http(shoald_.port(), "POST", "/v2/models/cnn/infer", header + input,
                  {"Content-Type: application/octet-stream",
                   "Inference-Header-Content-Length: " + std::to_string(header.size())},
                  0, 20000);
    ++total;
    const size_t jl = a.headers.count("inference-header-content-length")
                          ? std::stoul(a.headers["inference-header-content-length"])
                          : 0;
    if (a.status != 200 || a.body.size() != jl + 3 * 10 * 4) ++bad;
  };
  // Learn under light load (one client, a request every 10 ms).
  std::atomic<bool> learning{true};
  std::thread light([&] {
    while (learning) {
      infer();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  WaitScoring("cnn");
  learning = false;
  light.join();
  // Scored under bursts of four clients with idle gaps between them.
  for (int phase = 0; phase < 3; ++phase) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c) {
      clients.emplace_back([&] {
        const auto until = Clock::now() + std::chrono::milliseconds(1500);
        for (int n = 0; n < kMinPerBurst || Clock::now() < until; ++n) infer();
      });
    }
    for (auto& t : clients) t.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  }
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(total.load(), 3 * 4 * kMinPerBurst);
  EXPECT_EQ(Anomalies("cnn"), 0) << shoald_.Log();
  EXPECT_EQ(DetectorState("cnn").rfind("scoring", 0), 0u) << DetectorState("cnn");
}

}  // namespace
}  // namespace shoal::testing
