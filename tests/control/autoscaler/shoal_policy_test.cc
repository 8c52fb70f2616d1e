// Shoal policy: Erlang-C sizing against closed-form values, steady sizing, pre-warming on a
// rising forecast, lazy scale-down, and idle pre-warming from the idle-time histogram.
#include "shoal/control/autoscaler/shoal_policy.h"

#include <gtest/gtest.h>

#include "shoal/control/autoscaler/queueing.h"
#include "signals_for_test.h"

namespace shoal {
namespace {

using testing::Interval;
using testing::Serve;

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
  FunctionSignals s = Interval(now, 1, 1, 0);
  Serve(s, arrivals, service_s);
  s.slo_s = 1.0;  // wait budget 0.1 s
  return s;
}

// Half a second of service per request, the default the policies below assume.
ShoalParams HalfSecondService() {
  ShoalParams p;
  p.default_service_s = 0.5;
  return p;
}

// Feeds `pol` Steady(t, arrivals(t), 0.5) for t in [0, ticks), each changed by `edit`; the last
// decision.
template <typename Arrivals, typename Edit>
ScalingDecision Feed(ShoalPolicy& pol, int ticks, Arrivals arrivals, Edit edit) {
  ScalingDecision d;
  for (int t = 0; t < ticks; ++t) {
    FunctionSignals s = Steady(t, arrivals(t), 0.5);
    edit(s);
    d = pol.Observe(s);
  }
  return d;
}

TEST(ShoalPolicy, SizesSteadyLoadWithErlangC) {
  const ShoalParams p = HalfSecondService();
  ShoalPolicy pol(p);
  ScalingDecision d;
  for (int t = 0; t < 20; ++t) d = pol.Observe(Steady(t, 8, 0.5));
  EXPECT_NEAR(pol.level(), 8.0, 1e-9);
  EXPECT_EQ(d.replicas, 6u);
  EXPECT_EQ(d.prewarm, 0u);
  // Four requests per instance: 4 Erlangs over 4-slot instances need 6 slots -> 2 instances.
  ShoalPolicy wide(p);
  d = Feed(
      wide, 20, [](int) { return 8; }, [](FunctionSignals& s) { s.concurrency = 4; });
  EXPECT_EQ(d.replicas, 2u);
}

TEST(ShoalPolicy, PrewarmsWhenTheForecastRisesFasterThanAColdStart) {
  const ShoalParams p = HalfSecondService();
  ShoalPolicy pol(p);
  const auto cold_start_5s = [](FunctionSignals& s) { s.cold_start_cost_s = 5; };
  // +8 requests/s every second.
  ScalingDecision d = Feed(
      pol, 10, [](int t) { return 8 + 8 * t; }, cold_start_5s);
  EXPECT_GT(pol.trend(), 5.0);
  EXPECT_GT(d.prewarm, 0u);
  // Exactly what the forecast one cold start (+ one interval) ahead needs beyond now.
  const uint32_t ahead = pol.InstancesFor(pol.Forecast(5 + 1), 0.5, 1, 0.1);
  EXPECT_EQ(d.replicas + d.prewarm, ahead);
  // Flat load with the same cold-start cost pre-warms nothing.
  ShoalPolicy flat(p);
  d = Feed(
      flat, 10, [](int) { return 80; }, cold_start_5s);
  EXPECT_EQ(d.prewarm, 0u);
}

TEST(ShoalPolicy, ScalesDownLazily) {
  const ShoalParams p = HalfSecondService();
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
  // One request every 6 minutes, 20 times: idle periods all in the 360-370 s bin (10 s bins),
  // so pre-warm from 360 * 0.9 = 324 s and keep alive until 370 * 1.1 = 407 s.
  ScalingDecision d;
  for (int t = 0; t <= 20 * 360; ++t) d = pol.Observe(Steady(t, t % 360 == 0 ? 1 : 0, 0.1));
  // t = 7200 had an invocation. 200 s later: released (replicas 0), nothing pre-warmed,
  // idle instances go quickly (keep-alive one interval).
  for (int t = 7201; t <= 7400; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.replicas, 0u);
  EXPECT_EQ(d.prewarm, 0u);
  EXPECT_DOUBLE_EQ(d.keep_alive_s, 1.0);
  // The pre-warm starts two cold starts (1 s default each) and one interval early: at idle
  // 321 s, so the instance is ready at 324 s even when the cold start runs long.
  for (int t = 7401; t <= 7520; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.prewarm, 0u);  // idle 320 s
  d = pol.Observe(Steady(7521, 0, 0.1));
  EXPECT_EQ(d.prewarm, 1u);  // idle 321 s
  for (int t = 7522; t <= 7605; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.prewarm, 1u);  // idle 405 s
  pol.Observe(Steady(7606, 0, 0.1));
  d = pol.Observe(Steady(7608, 0, 0.1));
  EXPECT_EQ(d.prewarm, 0u);  // idle 408 s
}

TEST(ShoalPolicy, TimerJustOverTheMinuteStaysWarmWhileTheHistogramLearns) {
  // Called every 75 s: beyond the fixed minute, within KPA's 90 s. Before any idle period is
  // known the last instance stays 90 s; while fewer than 10 are known it stays as long as the
  // longest seen (+10%); never released between calls, so no call is cold.
  ShoalPolicy pol{ShoalParams{}};
  for (int t = 0; t <= 10 * 75; ++t) {  // the 11th call, at 750 s, completes the 10th period
    const ScalingDecision d = pol.Observe(Steady(t, t % 75 == 0 ? 1 : 0, 0.1));
    ASSERT_GE(d.replicas + d.prewarm, 1u) << "t=" << t;
  }
  // Learned (10 idle periods of 75 s, bin 70-80 s): released after the call, pre-warmed from
  // 63 - 2 - 1 = 60 s of idle on.
  ScalingDecision d;
  for (int t = 11 * 75; t <= 11 * 75 + 30; ++t) {
    d = pol.Observe(Steady(t, t % 75 == 0 ? 1 : 0, 0.1));
  }
  EXPECT_EQ(d.replicas + d.prewarm, 0u);
  for (int t = 11 * 75 + 31; t <= 11 * 75 + 62; ++t) d = pol.Observe(Steady(t, 0, 0.1));
  EXPECT_EQ(d.prewarm, 1u);
}

TEST(ShoalPolicy, PrewarmBringsBackThePreviousBurstsSize) {
  // Bursts of 40 requests in one interval every 120 s, 1 s each, one slot per instance: the
  // pre-warm restores the burst's size, not a single instance.
  ShoalParams p;
  p.default_service_s = 1.0;
  ShoalPolicy pol(p);
  ScalingDecision d;
  for (int t = 0; t <= 12 * 120; ++t) d = pol.Observe(Steady(t, t % 120 == 0 ? 40 : 0, 1.0));
  uint32_t peak_prewarm = 0;
  for (int t = 12 * 120 + 1; t < 13 * 120; ++t) {
    d = pol.Observe(Steady(t, 0, 1.0));
    peak_prewarm = std::max(peak_prewarm, d.prewarm);
  }
  EXPECT_GE(peak_prewarm, 10u);
}

TEST(ShoalPolicy, ShortQuietSpellsKeepTheInstance) {
  // A request every 20 s: the histogram learns 20-30 s gaps (pre-warm from 18 s), shorter than
  // the 30 s lazy scale-down window, so the instance is kept rather than released and
  // re-warmed between calls.
  ShoalPolicy pol{ShoalParams{}};
  for (int t = 0; t <= 15 * 20; ++t) {
    const ScalingDecision d = pol.Observe(Steady(t, t % 20 == 0 ? 1 : 0, 0.1));
    if (t > 20) {
      ASSERT_EQ(d.replicas, 1u) << "t=" << t;
    }
  }
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
