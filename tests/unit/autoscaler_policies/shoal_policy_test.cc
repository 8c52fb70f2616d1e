// Shoal policy: Erlang-C sizing against closed-form values, steady sizing, pre-warming on a
// rising forecast, lazy scale-down, and idle pre-warming from the idle-time histogram.
#include "shoal/autoscaler/shoal_policy.h"

#include <gtest/gtest.h>

#include "shoal/autoscaler/queueing.h"

namespace shoal {
namespace {

TEST(Queueing, ErlangCClosedForm) {
  // lambda = 8/s, service 0.5 s: a = 4 Erlangs.
  EXPECT_NEAR(ErlangC(5, 4), 0.5541125541, 1e-9);
  EXPECT_NEAR(ErlangC(6, 4), 0.2847608454, 1e-9);
  EXPECT_NEAR(ErlangC(7, 4), 0.1351101728, 1e-9);
  EXPECT_DOUBLE_EQ(ErlangC(4, 4), 1.0);  // unstable: everyone waits
  EXPECT_EQ(MinServersForWaitProbability(4, 0.2), 7u);
  // Mean wait C / (n mu - lambda): n = 6 -> 0.2848 / 4 = 0.0712 s.
  EXPECT_NEAR(MeanQueueWait(6, 8, 0.5), 0.0711902113, 1e-9);
  EXPECT_NEAR(MeanQueueWait(7, 8, 0.5), 0.0225183621, 1e-9);
  // Budget 0.1 s: n = 5 waits 0.277 s, n = 6 waits 0.071 s.
  EXPECT_EQ(MinServersForMeanWait(8, 0.5, 0.1, 0.95), 6u);
  // Utilisation cap 0.6: 4/6 = 0.67 is too much, 4/7 = 0.57 passes.
  EXPECT_EQ(MinServersForMeanWait(8, 0.5, 0.1, 0.6), 7u);
  EXPECT_EQ(MinServersForMeanWait(0, 0.5, 0.1, 0.95), 0u);
}

FunctionSignals Steady(double now, uint64_t arrivals, double service_s) {
  FunctionSignals s;
  s.now_s = now;
  s.interval_s = 1;
  s.arrivals = arrivals;
  s.completions = arrivals;
  s.mean_service_s = service_s;
  s.concurrency = 1;
  s.max_scale = 0;
  s.slo_s = 1.0;  // wait budget 0.1 s
  return s;
}

TEST(ShoalPolicy, SizesSteadyLoadWithErlangC) {
  ShoalParams p;
  p.default_service_s = 0.5;
  ShoalPolicy pol(p);
  ScalingDecision d;
  for (int t = 0; t < 20; ++t) d = pol.Observe(Steady(t, 8, 0.5));
  EXPECT_NEAR(pol.level(), 8.0, 1e-9);
  EXPECT_EQ(d.replicas, 6u);
  EXPECT_EQ(d.prewarm, 0u);
  // Four requests per instance: 4 Erlangs over 4-slot instances need 6 slots -> 2 instances.
  ShoalPolicy wide(p);
  for (int t = 0; t < 20; ++t) {
    FunctionSignals s = Steady(t, 8, 0.5);
    s.concurrency = 4;
    d = wide.Observe(s);
  }
  EXPECT_EQ(d.replicas, 2u);
}

TEST(ShoalPolicy, PrewarmsWhenTheForecastRisesFasterThanAColdStart) {
  ShoalParams p;
  p.default_service_s = 0.5;
  ShoalPolicy pol(p);
  ScalingDecision d;
  for (int t = 0; t < 10; ++t) {
    FunctionSignals s = Steady(t, 8 + 8 * t, 0.5);  // +8 requests/s every second
    s.cold_start_cost_s = 5;
    d = pol.Observe(s);
  }
  EXPECT_GT(pol.trend(), 5.0);
  EXPECT_GT(d.prewarm, 0u);
  // Exactly what the forecast one cold start (+ one interval) ahead needs beyond now.
  const uint32_t ahead = pol.InstancesFor(pol.Forecast(5 + 1), 0.5, 1, 0.1);
  EXPECT_EQ(d.replicas + d.prewarm, ahead);
  // Flat load with the same cold-start cost pre-warms nothing.
  ShoalPolicy flat(p);
  for (int t = 0; t < 10; ++t) {
    FunctionSignals s = Steady(t, 80, 0.5);
    s.cold_start_cost_s = 5;
    d = flat.Observe(s);
  }
  EXPECT_EQ(d.prewarm, 0u);
}

TEST(ShoalPolicy, ScalesDownLazily) {
  ShoalParams p;
  p.default_service_s = 0.5;
  ShoalPolicy pol(p);
  for (int t = 0; t < 20; ++t) ASSERT_LE(pol.Observe(Steady(t, 8, 0.5)).replicas, 6u);
  // Load falls to 1/s at t=20: the size of t=19 (6) holds while it is within 30 s.
  ScalingDecision d;
  for (int t = 20; t <= 49; ++t) {
    d = pol.Observe(Steady(t, 1, 0.5));
    ASSERT_EQ(d.replicas, 6u) << "t=" << t;
  }
  d = pol.Observe(Steady(50, 1, 0.5));
  EXPECT_LT(d.replicas, 6u);
}

TEST(ShoalPolicy, IdleFunctionIsReleasedAndPrewarmedFromItsHistogram) {
  ShoalPolicy pol{ShoalParams{}};
  // One request every 6 minutes, 20 times: idle times all in the 6-minute bin, so pre-warm
  // after 360 * 0.9 = 324 s and keep alive until 420 * 1.1 = 462 s after the invocation.
  ScalingDecision d;
  for (int t = 0; t <= 20 * 360; ++t) d = pol.Observe(Steady(t, t % 360 == 0 ? 1 : 0, 0.1));
  // t = 7200 had an invocation. 200 s later: released (replicas 0), nothing pre-warmed,
  // idle instances go quickly (keep-alive one interval).
  for (int t = 7201; t <= 7400; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.replicas, 0u);
  EXPECT_EQ(d.prewarm, 0u);
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 1.0);
  // From 324 s minus the cold start (1 s default): one instance pre-warmed.
  for (int t = 7401; t <= 7522; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.prewarm, 0u);  // idle 322 s
  d = pol.Observe(Steady(7523, 0, 0.1));
  EXPECT_EQ(d.prewarm, 1u);  // idle 323 s
  // ... until 462 s (the boundary itself is left to rounding: 420 * 1.1 is not exact).
  for (int t = 7524; t <= 7661; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.prewarm, 1u);  // idle 461 s
  pol.Observe(Steady(7662, 0, 0.1));
  d = pol.Observe(Steady(7663, 0, 0.1));
  EXPECT_EQ(d.prewarm, 0u);  // idle 463 s
}

TEST(ShoalPolicy, FactoryBuildsItAndRejectsBadParameters) {
  PolicyParams p;
  auto ok = MakeScalingPolicy("shoal", p);
  ASSERT_TRUE(ok.ok());
  EXPECT_STREQ((*ok)->name(), "shoal");
  p.shoal.max_utilization = 1.5;
  auto bad = MakeScalingPolicy("shoal", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shoal.max_utilization"), std::string::npos);
  PolicyParams r;
  r.rl_q.targets = {};
  auto bad_rl = MakeScalingPolicy("rl-q", r);
  ASSERT_FALSE(bad_rl.ok());
  EXPECT_NE(bad_rl.status().message().find("rl_q.targets"), std::string::npos);
}

}  // namespace
}  // namespace shoal
