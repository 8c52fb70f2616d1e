// Autoscaling live: a real shoald runs each function's policy (the objects the simulator runs)
// every autoscale interval. Step load up and down with no failed request, scale to zero and
// back, and a pre-warmed instance serving a periodic caller. The windows are shortened through
// the manifest's params and the node's autoscale interval so each test takes seconds; every
// wait polls against a deadline (2-core CI machines run these next to other builds).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "shoald_fixture.h"

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
  auto d = shoald_.Deploy(Manifest("step",
                                   "  concurrency: 1\n"
                                   "  keepAlive: 1s\n"
                                   "  autoscaling:\n"
                                   "    policy: kpa\n"
                                   "    maxScale: 6\n"
                                   "    params: {stableWindow: 4s, panicWindow: 1s, "
                                   "scaleToZeroGrace: 1s}\n"));
  ASSERT_EQ(d.exit_code, 0) << d.err;

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
  const bool up = WaitFor("step", [&](const json& st) {
    peak = std::max(peak, Ready(st));
    return Ready(st) >= 3 && st.value("desired", 0) >= 3;
  }, std::chrono::seconds(15));
  EXPECT_TRUE(up) << "replicas did not follow the load up (peak ready " << peak << ")";
  // Step down to one client: instances drain and stop while requests keep flowing.
  clients_wanted = 1;
  const bool partly = WaitFor("step", [](const json& st) {
    return st.value("desired", 99) <= 2 && Ready(st) <= 2;
  }, std::chrono::seconds(15));
  EXPECT_TRUE(partly) << "replicas did not follow the load down: " << Status("step").dump();
  EXPECT_NE(shoald_.Log().find("scaling down to"), std::string::npos);  // drained under load
  clients_wanted = 0;
  for (auto& t : clients) t.join();
  EXPECT_GT(ok.load(), 10);

  // Step down: the stable window empties, instances above the target drain and stop, and after
  // the grace period the last one goes too.
  const bool down = WaitFor("step", [](const json& st) {
    return Alive(st) == 0 && st.value("desired", -1) == 0;
  }, std::chrono::seconds(20));
  EXPECT_TRUE(down) << Status("step").dump();
  EXPECT_EQ(failed.load(), 0);
  const json st = Status("step");
  EXPECT_EQ(st.value("errors_total", -1), 0);
  EXPECT_EQ(st.value("policy", ""), "kpa");
  EXPECT_GE(shoald_.Metric("shoal_autoscaler_decision_changes_total", "function=\"step\""), 2);
  EXPECT_EQ(shoald_.Metric("shoal_autoscaler_desired_replicas", "function=\"step\""), 0);
  EXPECT_NE(shoald_.Log().find("function step: autoscaler kpa: desired"), std::string::npos);
}

TEST_F(AutoscaleTest, ScaledToZeroFunctionServesItsNextRequest) {
  auto d = shoald_.Deploy(Manifest("zero",
                                   "  keepAlive: 500ms\n"
                                   "  autoscaling:\n"
                                   "    policy: kpa\n"
                                   "    params: {stableWindow: 2s, panicWindow: 500ms, "
                                   "scaleToZeroGrace: 500ms}\n"));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  auto first = Http(shoald_.port(), "GET", "/fn/zero?ms=1");
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_TRUE(WaitFor("zero", [](const json& st) { return Alive(st) == 0; },
                      std::chrono::seconds(15)))
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
  auto d = shoald_.Deploy(Manifest("tick",
                                   "  keepAlive: 10s\n"
                                   "  autoscaling:\n"
                                   "    policy: shoal\n"
                                   "    keepAlive: histogram\n"
                                   "    params: {histogramBin: 1s, minSamples: 3, "
                                   "scaleDownDelay: 0s, coldStart: 10ms}\n"));
  ASSERT_EQ(d.exit_code, 0) << d.err;
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
  EXPECT_GE(st.value("cold_starts_avoided", 0), 1) << "after " << calls + 1 << " calls: "
                                                    << st.dump();
  EXPECT_GE(shoald_.Metric("shoal_autoscaler_cold_starts_avoided_total", "function=\"tick\""), 1);
  EXPECT_NE(shoald_.Log().find("pre-warm"), std::string::npos);
}

TEST_F(AutoscaleTest, DescribeAndTopShowTheAutoscaler) {
  auto d = shoald_.Deploy(Manifest("shown",
                                   "  autoscaling:\n"
                                   "    policy: kpa\n"
                                   "    target: 2\n"
                                   "    minScale: 1\n"
                                   "    maxScale: 3\n"));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  ASSERT_TRUE(shoald_.WaitReady("shown", 1));
  ASSERT_TRUE(WaitFor("shown", [](const json& st) {
    return st.value("decision", json::object()).value("age_s", -1.0) >= 0;
  }, std::chrono::seconds(10)));
  auto desc = shoald_.Cli({"describe", "shown"});
  ASSERT_EQ(desc.exit_code, 0) << desc.err;
  EXPECT_NE(desc.out.find("Autoscaling:   kpa, target 2.0, keep-alive fixed"), std::string::npos)
      << desc.out;
  EXPECT_NE(desc.out.find("  Autoscaler:  desired 1, actual 1 (replicas 1 + pre-warm 0)"),
            std::string::npos)
      << desc.out;
  EXPECT_NE(desc.out.find("  Last change: desired 1"), std::string::npos) << desc.out;
  auto top = shoald_.Cli({"top"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("POLICY   DESIRED   ACTUAL"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("shown      kpa      1         1 "), std::string::npos) << top.out;
}

}  // namespace
}  // namespace shoal::testing
