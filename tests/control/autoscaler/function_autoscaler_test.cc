// FunctionAutoscaler: a manifest's autoscaling block turned into policy objects, as shoald and
// the simulator's scenarios build them.
#include "shoal/control/autoscaler/function_autoscaler.h"

#include <gtest/gtest.h>

#include "signals_for_test.h"

namespace shoal {
namespace {

using testing::Interval;
using testing::Serve;

FunctionSignals Busy(double now, uint32_t inflight) {
  FunctionSignals s = Interval(now, 2, 10, 100);
  Serve(s, inflight, 0.1);
  s.inflight = inflight;
  s.ready = 1;
  return s;
}

TEST(FunctionAutoscaler, KpaParamsFromTheManifestChangeItsWindows) {
  AutoscalingConfig c;
  c.policy = "kpa";
  c.target = 5;
  c.params = {{"stableWindow", 10},        {"panicWindow", 2},
              {"scaleToZeroGrace", 0},     {"scaleToZeroPodRetention", 45},
              {"targetBurstCapacity", -1}, {"activationTimeout", 90}};
  PolicyParams p;
  KeepAliveParams k;
  double slo = -1;
  ASSERT_TRUE(BuildAutoscalingParams(c, &p, &k, &slo).ok());
  EXPECT_DOUBLE_EQ(p.kpa.stable_window_s, 10);
  EXPECT_DOUBLE_EQ(p.kpa.panic_window_percentage, 20);
  EXPECT_DOUBLE_EQ(p.kpa.bucket_s, 1);
  EXPECT_DOUBLE_EQ(p.kpa.target, 5);
  EXPECT_DOUBLE_EQ(p.kpa.scale_to_zero_grace_period_s, 0);
  EXPECT_DOUBLE_EQ(p.kpa.scale_to_zero_pod_retention_s, 45);
  EXPECT_DOUBLE_EQ(p.rl_q.kpa.scale_to_zero_pod_retention_s, 45);
  EXPECT_DOUBLE_EQ(p.kpa.target_burst_capacity, -1);
  EXPECT_DOUBLE_EQ(p.kpa.activation_timeout_s, 90);
  EXPECT_DOUBLE_EQ(p.rl_q.kpa.activation_timeout_s, 90);
  EXPECT_DOUBLE_EQ(slo, 0);

  auto a = FunctionAutoscaler::Make(c);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // 20 in flight over a target of 5 at 70%: ceil(20 / 3.5) = 6; keep-alive is the fixed one.
  const ScalingDecision d = (*a)->Observe(Busy(1, 20));
  EXPECT_EQ(d.replicas, 6u);
  EXPECT_DOUBLE_EQ(d.concurrency_target, 5);
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 60);

  c.params = {{"targetBurstCapacity", -5}};
  const Status bad = BuildAutoscalingParams(c, nullptr, nullptr, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("params: kpa.target_burst_capacity must be >= 0 or -1 (got -5)"),
            std::string::npos)
      << bad.message();
}

TEST(FunctionAutoscaler, HistogramKeepAliveWithKpaCoversTheObservedIdleTimes) {
  AutoscalingConfig c;
  c.policy = "kpa";
  c.keep_alive = "histogram";
  c.fixed_keep_alive_s = 30;
  auto a = FunctionAutoscaler::Make(c);
  ASSERT_TRUE(a.ok());
  ScalingDecision d;
  for (int call = 0; call < 4; ++call) {
    d = (*a)->Observe(Busy(call * 100.0, 1));
    for (int t = 2; t < 100; t += 2) d = (*a)->Observe(Busy(call * 100.0 + t, 0));
  }
  // Three idle times of 100 s seen (too few for the histogram): 100 s + 10%.
  EXPECT_NEAR(d.keep_alive_s, 110, 1e-9);
}

TEST(FunctionAutoscaler, EveryPolicyBuildsAndDecides) {
  for (const char* policy : {"kpa", "rl-q", "shoal"}) {
    AutoscalingConfig c;
    c.policy = policy;
    auto a = FunctionAutoscaler::Make(c);
    ASSERT_TRUE(a.ok()) << policy << ": " << a.status().ToString();
    EXPECT_EQ((*a)->policy_name(), policy);
    const ScalingDecision d = (*a)->Observe(Busy(2, 30));
    EXPECT_GE(d.replicas, 1u) << policy;
    EXPECT_GT(d.keep_alive_s, 0) << policy;
  }
}

TEST(FunctionAutoscaler, ErrorsNameTheEntry) {
  auto error = [](AutoscalingConfig c) {
    Status st = BuildAutoscalingParams(c, nullptr, nullptr, nullptr);
    return st.ok() ? std::string("ok") : st.message();
  };
  AutoscalingConfig c;
  c.policy = "hpa";
  EXPECT_EQ(error(c), "policy: must be none, kpa, rl-q, shoal or learned, got \"hpa\"");
  c.policy = "shoal";
  c.params = {{"stableWindow", 5}};
  EXPECT_EQ(error(c), "params.stableWindow: not a parameter of policy shoal (it is for kpa rl-q)");
  c.params = {{"maxUtilization", 1.5}};
  EXPECT_EQ(error(c), "params: shoal.max_utilization must be in (0, 1) (got 1.5)");
  c.policy = "rl-q";
  c.params = {{"learningRate", 0.5}, {"decisionInterval", 4}, {"slo", 0.2}};
  PolicyParams p;
  double slo = 0;
  ASSERT_TRUE(BuildAutoscalingParams(c, &p, nullptr, &slo).ok());
  EXPECT_DOUBLE_EQ(p.rl_q.alpha, 0.5);
  EXPECT_DOUBLE_EQ(p.rl_q.decision_interval_s, 4);
  EXPECT_DOUBLE_EQ(slo, 0.2);
  c.policy = "none";
  c.params.clear();
  EXPECT_EQ(error(c), "ok");
  EXPECT_FALSE(FunctionAutoscaler::Make(c).ok());
}

}  // namespace
}  // namespace shoal
