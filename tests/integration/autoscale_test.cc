// Autoscaling live: a real shoald runs each function's policy (the objects the simulator runs)
// every autoscale interval. Step load up and down with no failed request, scale to zero and
// back, and a pre-warmed instance serving a periodic caller. The windows are shortened through
// the manifest's params and the node's autoscale interval so each test takes seconds; every
// wait polls against a deadline (2-core CI machines run these next to other builds).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/shoald_fixture.h"
#include "tests/support/text_checks.h"

namespace shoal::testing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string Manifest(const std::string& name, const std::string& spec) {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
         "\nspec:\n  handler:\n    builtin: sleep\n" + spec;
}

class AutoscaleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Shoald::Options o;
    o.extra_yaml = "autoscale_interval_ms: 250\n";
    ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  json Status(const std::string& fn) {
    auto r = shoald_.Api("GET", "/v1/functions/" + fn);
    if (r.status != 200) return json::object();
    return json::parse(r.body, nullptr, false).value("status", json::object());
  }
  // Deploys the sleep function `name` with `spec` (under spec:) through the CLI.
  ::testing::AssertionResult Deployed(const std::string& name, const std::string& spec) {
    const CliResult d = shoald_.Deploy(Manifest(name, spec));
    if (d.exit_code == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "deploy " << name << ": exit " << d.exit_code << ": " << d.err;
  }
  // Polls `pred` on the function's status until it holds or `timeout` passes.
  template <typename Pred>
  bool WaitFor(const std::string& fn, Pred pred, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (pred(Status(fn))) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pred(Status(fn));
  }
  Shoald shoald_;
};

int Ready(const json& st) { return st.value("ready", 0); }
int Alive(const json& st) { return st.value("instances_total", 0); }

TEST_F(AutoscaleTest, KpaStepLoadScalesUpAndBackDownWithoutFailedRequests) {
  ASSERT_TRUE(Deployed("step",
                       "  concurrency: 1\n"
                       "  keepAlive: 1s\n"
                       "  autoscaling:\n"
                       "    policy: kpa\n"
                       "    maxScale: 6\n"
                       "    params: {stableWindow: 4s, panicWindow: 1s, "
                       "scaleToZeroGrace: 1s}\n"));

  // Step up: four closed-loop clients on a one-slot function.
  std::atomic<int> clients_wanted{4};
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      while (i < clients_wanted) {
        auto r = Http(shoald_.port(), "GET", "/fn/step?ms=100", {}, {}, 0, 30000);
        (r.status == 200 ? ok : failed)++;
        if (r.status != 200) ADD_FAILURE() << r.status << " " << r.error << r.body;
      }
    });
  }
  int peak = 0;
  const bool up = WaitFor(
      "step",
      [&](const json& st) {
        peak = std::max(peak, Ready(st));
        return Ready(st) >= 3 && st.value("desired", 0) >= 3;
      },
      std::chrono::seconds(15));
  EXPECT_TRUE(up) << "replicas did not follow the load up (peak ready " << peak << ")";
  // Step down to one client: instances drain and stop while requests keep flowing.
  clients_wanted = 1;
  const bool partly = WaitFor(
      "step", [](const json& st) { return st.value("desired", 99) <= 2 && Ready(st) <= 2; },
      std::chrono::seconds(15));
  EXPECT_TRUE(partly) << "replicas did not follow the load down: " << Status("step").dump();
  EXPECT_TRUE(Contains(shoald_.Log(), "scaling down to"));  // drained under load
  clients_wanted = 0;
  for (auto& t : clients) t.join();
  EXPECT_GT(ok.load(), 10);

  // Step down: the stable window empties, instances above the target drain and stop, and after
  // the grace period the last one goes too.
  const bool down = WaitFor(
      "step", [](const json& st) { return Alive(st) == 0 && st.value("desired", -1) == 0; },
      std::chrono::seconds(20));
  EXPECT_TRUE(down) << Status("step").dump();
  EXPECT_EQ(failed.load(), 0);
  const json st = Status("step");
  EXPECT_EQ(st.value("errors_total", -1), 0);
  EXPECT_EQ(st.value("policy", ""), "kpa");
  EXPECT_GE(shoald_.Metric("shoal_autoscaler_decision_changes_total", "function=\"step\""), 2);
  EXPECT_EQ(shoald_.Metric("shoal_autoscaler_desired_replicas", "function=\"step\""), 0);
  EXPECT_TRUE(Contains(shoald_.Log(), "function step: autoscaler kpa: desired"));
}

TEST_F(AutoscaleTest, ScaledToZeroFunctionServesItsNextRequest) {
  ASSERT_TRUE(Deployed("zero",
                       "  keepAlive: 500ms\n"
                       "  autoscaling:\n"
                       "    policy: kpa\n"
                       "    params: {stableWindow: 2s, panicWindow: 500ms, "
                       "scaleToZeroGrace: 500ms}\n"));
  auto first = Http(shoald_.port(), "GET", "/fn/zero?ms=1");
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_TRUE(WaitFor(
      "zero", [](const json& st) { return Alive(st) == 0; }, std::chrono::seconds(15)))
      << "never scaled to zero: " << Status("zero").dump();
  // (KPA may have started two for the first request: one in flight over a 70% target.)
  const int before = Status("zero").value("cold_starts", 0);
  ASSERT_GE(before, 1);
  auto again = Http(shoald_.port(), "GET", "/fn/zero?ms=1");
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.body, "slept 1 ms\n");
  EXPECT_GE(Status("zero").value("cold_starts", 0), before + 1);
}

TEST_F(AutoscaleTest, ShoalPolicyPrewarmsAheadOfAPeriodicCaller) {
  // Idle periods of ~2.5 s land in one 1-second bin; after three of them the histogram trusts
  // itself: release the instance a second after each call, start one again ~1.5 s after the
  // call (pre-warm from 1.8 s, less two cold starts and one interval of lead).
  ASSERT_TRUE(Deployed("tick",
                       "  keepAlive: 10s\n"
                       "  autoscaling:\n"
                       "    policy: shoal\n"
                       "    keepAlive: histogram\n"
                       "    params: {histogramBin: 1s, minSamples: 3, "
                       "scaleDownDelay: 0s, coldStart: 10ms}\n"));
  const auto period = std::chrono::milliseconds(2500);
  auto next = Clock::now();
  int calls = 0;
  json st;
  for (; calls < 10; ++calls) {
    std::this_thread::sleep_until(next);
    next += period;
    auto r = Http(shoald_.port(), "GET", "/fn/tick?ms=10");
    ASSERT_EQ(r.status, 200) << r.error << r.body;
    st = Status("tick");
    if (st.value("cold_starts_avoided", 0) >= 1) break;
  }
  EXPECT_GE(st.value("prewarm_starts", 0), 1) << st.dump();
  EXPECT_GE(st.value("cold_starts_avoided", 0), 1)
      << "after " << calls + 1 << " calls: " << st.dump();
  EXPECT_GE(shoald_.Metric("shoal_autoscaler_cold_starts_avoided_total", "function=\"tick\""), 1);
  EXPECT_TRUE(Contains(shoald_.Log(), "pre-warm"));
}

TEST_F(AutoscaleTest, DescribeAndTopShowTheAutoscaler) {
  ASSERT_TRUE(Deployed("shown",
                       "  autoscaling:\n"
                       "    policy: kpa\n"
                       "    target: 2\n"
                       "    minScale: 1\n"
                       "    maxScale: 3\n"));
  ASSERT_TRUE(shoald_.WaitReady("shown", 1));
  ASSERT_TRUE(WaitFor(
      "shown",
      [](const json& st) { return st.value("decision", json::object()).value("age_s", -1.0) >= 0; },
      std::chrono::seconds(10)));
  auto desc = shoald_.Cli({"describe", "shown"});
  ASSERT_EQ(desc.exit_code, 0) << desc.err;
  EXPECT_TRUE(Contains(desc.out, "Autoscaling:   kpa, target 2.0, keep-alive fixed"));
  EXPECT_TRUE(Contains(desc.out, "  Autoscaler:  desired 1, actual 1 (replicas 1 + pre-warm 0)"));
  EXPECT_TRUE(Contains(desc.out, "  Last change: desired 1"));
  auto top = shoald_.Cli({"top"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_TRUE(Contains(top.out, "POLICY   DESIRED   ACTUAL"));
  EXPECT_TRUE(Contains(top.out, "shown      kpa      1         1 "));
}

// The learned policy through a real shoald, on the shipped table named by policyFile, with time
// compressed 40x (timeScale 0.025: a 1.9 s timer reads as the table's 76 s one, the Huawei
// study's timer just past the minute). What the table decides for such a timer: keep the
// instance through the first idle periods (no history: keep-2m; one or two tight periods:
// keep-20m), then, with three or more periods of tight spread, release it after each call and
// pre-warm it over median +- 10 %. A 100 ms tick keeps the measured idle times within a few %.
class LearnedAutoscaleTest : public AutoscaleTest {
 protected:
  void SetUp() override {
    Shoald::Options o;
    o.extra_yaml = "autoscale_interval_ms: 100\n";
    ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  }
};

TEST_F(LearnedAutoscaleTest, TimerIsKeptThenReleasedAndPrewarmedPerTheTable) {
  const std::string table = std::string(SHOAL_SOURCE_DIR) + "/deploy/policies/learned-v1.json";
  const std::string file_line = "    policyFile: " + table + "\n";
  ASSERT_TRUE(Deployed("timer",
                       "  keepAlive: 10m\n"
                       "  autoscaling:\n"
                       "    policy: learned\n" +
                           file_line +
                           "    params: {timeScale: 0.025, "
                           "excessKeepAlive: 1s, scaleDownDelay: 1s}\n"));
  auto desc = shoald_.Cli({"describe", "timer"});
  ASSERT_EQ(desc.exit_code, 0) << desc.err;
  const std::string shown =
      "Autoscaling:   learned, keep-alive fixed (excessKeepAlive=1, "
      "scaleDownDelay=1, timeScale=0.025), policy file " +
      table;
  EXPECT_TRUE(Contains(desc.out, shown));

  const auto period = std::chrono::milliseconds(1900);
  auto next = Clock::now();
  int failed = 0;
  int kept_idle = 0, released_idle = 0, prewarmed_idle = 0;
  std::vector<std::string> actions;  // the idle action in force after each call
  for (int call = 0; call < 8; ++call) {
    auto r = Http(shoald_.port(), "GET", "/fn/timer?ms=10");
    if (r.status != 200) {
      ++failed;
      ADD_FAILURE() << "call " << call << ": " << r.status << " " << r.error << r.body;
    }
    next += period;
    // Through the idle period: what the policy holds, by tick.
    std::string action;
    while (Clock::now() + std::chrono::milliseconds(60) < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const json st = Status("timer");
      const json dec = st.value("decision", json::object());
      const std::string reason = dec.value("reason", "");
      const size_t at = reason.find("; idle action ");
      if (at == std::string::npos) continue;  // still active (or before the first tick)
      action = reason.substr(at + 14, reason.find(' ', at + 14) - at - 14);
      const int replicas = dec.value("replicas", -1), prewarm = dec.value("prewarm", -1);
      if (call >= 4) {  // three idle periods known: the pre-warm action
        released_idle += replicas == 0 && prewarm == 0;
        prewarmed_idle += replicas == 0 && prewarm == 1;
      } else {
        kept_idle += replicas == 1 && prewarm == 0;
      }
      // The gauge is the decision describe shows: the learned policy holds its instance through
      // the replicas; instances above them go after a tick (1 s at least).
      EXPECT_DOUBLE_EQ(shoald_.Metric("shoal_autoscaler_keep_alive_seconds", "function=\"timer\""),
                       dec.value("keep_alive_s", -1.0));
    }
    actions.push_back(action);
    std::this_thread::sleep_until(next);
  }
  ASSERT_EQ(actions.size(), 8u);
  EXPECT_EQ(actions[0], "keep-2m");
  EXPECT_EQ(actions[1], "keep-20m");
  EXPECT_EQ(actions[2], "keep-20m");
  for (int k = 3; k < 8; ++k) EXPECT_EQ(actions[k], "prewarm-median+-10%") << "after call " << k;
  EXPECT_GT(kept_idle, 10);      // ticks of calls 1-3's idle periods holding the instance
  EXPECT_GT(released_idle, 10);  // released after each later call
  EXPECT_GT(prewarmed_idle, 0);  // and brought back before the next
  desc = shoald_.Cli({"describe", "timer"});
  EXPECT_TRUE(Contains(desc.out,
                       "idle action prewarm-median+-10% (window 2-2 s; idle periods 3-10, "
                       "median 45-90s, q90/q10 <1.3; expects "));
  // A version-1 file has no busy-time sizing table: describe says which sizing ran instead.
  EXPECT_TRUE(Contains(desc.out,
                       "sizing x1.00-hold-10s (shoal's Erlang-C as is: the policy file is "
                       "version 1, which has no sizing table)"));
  const json st = Status("timer");
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(st.value("errors_total", -1), 0);
  EXPECT_EQ(st.value("policy", ""), "learned");
  EXPECT_EQ(st.value("cold_requests", -1), 1) << st.dump();  // the first call's only
  EXPECT_GE(st.value("cold_starts_avoided", 0), 3) << st.dump();
  EXPECT_GE(shoald_.Metric("shoal_autoscaler_prewarm_starts_total", "function=\"timer\""), 3);
  // With the calls over, the pre-warm window passes and nothing is left running.
  EXPECT_TRUE(WaitFor(
      "timer", [](const json& s) { return Alive(s) == 0; }, std::chrono::seconds(5)))
      << Status("timer").dump();
}

// The compiled-in version-2 table: describe shows the replicas the busy-time sizing decided and
// why (the sizing action, the context it was read in, the context's measured features and what
// the table expects of the action per interval).
TEST_F(AutoscaleTest, LearnedDescribeShowsTheBusyTimeSizingAndItsContext) {
  ASSERT_TRUE(Deployed("sized",
                       "  concurrency: 4\n"
                       "  autoscaling:\n"
                       "    policy: learned\n"
                       "    maxScale: 4\n"));
  for (int call = 0; call < 6; ++call) {
    auto r = Http(shoald_.port(), "GET", "/fn/sized?ms=20");
    EXPECT_EQ(r.status, 200) << r.error << r.body;
  }
  std::string reason;
  EXPECT_TRUE(WaitFor(
      "sized",
      [&](const json& st) {
        reason = st.value("decision", json::object()).value("reason", "");
        return reason.find("; sizing ") != std::string::npos;
      },
      std::chrono::seconds(5)))
      << reason;
  // The sizing the table chose, the context it was read in (load and dispersion buckets; the
  // first ticks see a short window, so which bucket depends on timing), the measured features,
  // and the table's per-interval expectation for that action in that context.
  EXPECT_TRUE(Contains(reason, "; sizing x"));
  EXPECT_TRUE(Contains(reason, " (load "));
  EXPECT_TRUE(Contains(reason, " instances, dispersion "));
  EXPECT_TRUE(Contains(reason, "; expects "));
  EXPECT_TRUE(Contains(reason, " slo misses per interval)"));
  auto desc = shoald_.Cli({"describe", "sized"});
  ASSERT_EQ(desc.exit_code, 0) << desc.err;
  EXPECT_TRUE(Contains(desc.out, "(replicas "));
  EXPECT_TRUE(Contains(desc.out, "; sizing x"));
  EXPECT_TRUE(Contains(desc.out, " slo misses per interval)"));
}

TEST_F(AutoscaleTest, CorruptLearnedPolicyFileIsRefusedAtDeploy) {
  const std::string good_path = std::string(SHOAL_SOURCE_DIR) + "/deploy/policies/learned-v1.json";
  std::ifstream in(good_path);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(good.find("\"version\": 1,"), std::string::npos);
  auto deploy = [&](const std::string& text) {
    const std::string path = shoald_.state_dir() + "/learned-bad.json";
    std::ofstream(path) << text;
    return shoald_.Deploy(Manifest(
        "badtable", "  autoscaling:\n    policy: learned\n    policyFile: " + path + "\n"));
  };
  auto truncated = deploy(good.substr(0, good.size() / 2));
  EXPECT_NE(truncated.exit_code, 0);
  EXPECT_TRUE(Contains(truncated.err, "spec.autoscaling.policyFile: learned policy "));
  std::string v3 = good;
  v3.replace(v3.find("\"version\": 1,"), 13, "\"version\": 3,");
  auto newer = deploy(v3);
  EXPECT_NE(newer.exit_code, 0);
  EXPECT_TRUE(Contains(newer.err, "spec.autoscaling.policyFile: learned policy "));
  EXPECT_TRUE(Contains(newer.err, "version 3 is incompatible: this build reads versions 1 to 2"));
  EXPECT_NE(shoald_.Api("GET", "/v1/functions/badtable").status, 200);
  // A version-1 file (idle table only) is still read; the shipped version-2 file deploys too.
  auto good_deploy = deploy(good);
  EXPECT_EQ(good_deploy.exit_code, 0) << good_deploy.err;
}

}  // namespace
}  // namespace shoal::testing
