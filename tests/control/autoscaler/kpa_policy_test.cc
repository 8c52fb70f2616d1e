// KPA against worked examples built from Knative's documented rules (defaults: 60 s stable
// window, 6 s panic window, panic at 200%, utilisation 70%, scale-down rate 2, grace 30 s as
// an upper bound, pod retention 0 s, target burst capacity 211) and from the KPA reconciler's
// handleScaleToZero (knative/serving pkg/reconciler/autoscaling/kpa/scaler.go).
#include "shoal/control/autoscaler/kpa_policy.h"

#include <gtest/gtest.h>

#include "signals_for_test.h"

namespace shoal {
namespace {

using testing::Interval;

FunctionSignals Sig(double now, uint32_t concurrency_observed, uint32_t ready) {
  // Per-instance limit 1: target 1, so target value 0.7; no max_scale.
  FunctionSignals s = Interval(now, 1, 1, 0);
  s.inflight = concurrency_observed;
  s.ready = ready;
  return s;
}

TEST(KpaPolicy, SteadyLoadTenWithTargetOneGivesFifteen) {
  KpaPolicy kpa{KpaParams{}};
  ScalingDecision d;
  for (int t = 0; t <= 60; ++t) d = kpa.Observe(Sig(t, 10, 15));
  // ceil(10 / (1 * 0.7)) = ceil(14.29) = 15
  EXPECT_EQ(d.replicas, 15u);
  EXPECT_DOUBLE_EQ(d.concurrency_target, 1.0);
  EXPECT_FALSE(d.panic);
  EXPECT_DOUBLE_EQ(kpa.stable_average(), 10.0);
}

// Steady 10 (15 ready) for a minute, then 40 concurrent from t = 60.
class KpaSpike : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int t = 0; t < 60; ++t) ASSERT_EQ(kpa.Observe(Sig(t, 10, 15)).replicas, 15u);
  }
  KpaPolicy kpa{KpaParams{}};
};

TEST_F(KpaSpike, EntersPanicOnThePanicWindowAndNeverScalesDownInIt) {
  // t=60: panic avg (5*10+40)/6 = 15 -> 22 pods, 22/15 < 2; stable (59*10+40)/60 = 10.5 -> 15.
  ScalingDecision d = kpa.Observe(Sig(60, 40, 15));
  EXPECT_FALSE(d.panic);
  EXPECT_EQ(d.replicas, 15u);
  // t=61: panic avg 20 -> 29 pods, 29/15 = 1.93 < 2: still stable, stable avg 11 -> 16.
  d = kpa.Observe(Sig(61, 40, 15));
  EXPECT_FALSE(d.panic);
  EXPECT_EQ(d.replicas, 16u);
  // t=62: panic avg 25 -> 36 pods, 36/15 = 2.4 >= 2: panic, scaled on the panic window
  // (the stable window alone would say ceil(11.5/0.7) = 17).
  d = kpa.Observe(Sig(62, 40, 15));
  EXPECT_TRUE(d.panic);
  EXPECT_EQ(d.replicas, 36u);
  uint32_t ready = d.replicas;
  // Panic window fills with 40: 30 -> 43, 35 -> 50, 40 -> 58.
  const uint32_t expected[] = {43, 50, 58};
  for (int i = 0; i < 3; ++i) {
    const uint32_t expect = expected[i];
    d = kpa.Observe(Sig(63 + i, 40, ready));
    ready = d.replicas;
    EXPECT_EQ(d.replicas, expect);
    EXPECT_TRUE(d.panic);
  }
  // Load back to 10 at t=66: the windows fall, but panic holds the maximum (58).
  for (int t = 66; t <= 122; ++t) {
    d = kpa.Observe(Sig(t, 10, ready));
    ready = d.replicas;
    ASSERT_TRUE(d.panic) << "t=" << t;
    ASSERT_EQ(d.replicas, 58u) << "t=" << t;
  }
  // The panic condition last held at t=62; one stable window later (now > 62 + 60) panic
  // ends. Stable avg over [64, 123] = (2*40 + 58*10)/60 = 11 -> 16 pods, but the scale-down
  // rate 2 allows at most 58 -> floor(58/2) = 29 in one step.
  d = kpa.Observe(Sig(123, 10, ready));
  EXPECT_FALSE(d.panic);
  EXPECT_EQ(d.replicas, 29u);
  // Next second, in stable mode: (40 + 59*10)/60 = 10.5 -> 15.
  d = kpa.Observe(Sig(124, 10, d.replicas));
  EXPECT_EQ(d.replicas, 15u);
}

// Steady 10 concurrent (15 ready) for a minute, then nothing from t=60: runs to t=118, when
// the last non-zero bucket (t=59) is still in the 60 s stable window, and returns the ready
// count then (1: ceil((10/60)/0.7) = 1 at t=118).
uint32_t RunToTheLastNonZeroWindow(KpaPolicy& kpa) {
  uint32_t ready = 15;
  for (int t = 0; t < 60; ++t) ready = kpa.Observe(Sig(t, 10, ready)).replicas;
  EXPECT_EQ(ready, 15u);
  for (int t = 60; t <= 118; ++t) {
    ready = kpa.Observe(Sig(t, 0, ready)).replicas;
    EXPECT_GE(ready, 1u) << "t=" << t;
  }
  EXPECT_EQ(ready, 1u);
  return ready;
}

// Runs `kpa` to its last non-zero window, then, with no traffic from t=119, expects the last
// instance kept through t=`last` and gone at t=`last` + 1.
void ExpectLastInstanceHeldThrough(KpaPolicy& kpa, int last) {
  uint32_t ready = RunToTheLastNonZeroWindow(kpa);
  for (int t = 119; t <= last; ++t) {
    ready = kpa.Observe(Sig(t, 0, ready)).replicas;
    ASSERT_EQ(ready, 1u) << "t=" << t;
  }
  EXPECT_EQ(kpa.Observe(Sig(last + 1, 0, ready)).replicas, 0u);
}

TEST(KpaPolicy, ScalesToZeroAtOnceWhenTheActivatorHasLongBeenInThePath) {
  // Per-instance limit 1: 15 ready give 15 slots, under the burst capacity of 211, so the
  // activator was in the request path all along (excess burst capacity < 0). When the window
  // empties (t=119) the PA has been active over a stable window: it goes inactive and, the
  // activator having proxied for more than the 30 s grace, the last instance goes at once.
  KpaPolicy kpa{KpaParams{}};
  RunToTheLastNonZeroWindow(kpa);
  ScalingDecision d = kpa.Observe(Sig(119, 0, 1));
  EXPECT_EQ(d.replicas, 0u);
  // Nothing running and no traffic: stays at zero.
  EXPECT_EQ(kpa.Observe(Sig(120, 0, 0)).replicas, 0u);
  // A request arrives at a scaled-to-zero function: averages 1/60 and 1/6 give one instance.
  d = kpa.Observe(Sig(121, 1, 0));
  EXPECT_EQ(d.replicas, 1u);
  EXPECT_FALSE(d.panic);
}

TEST(KpaPolicy, WaitsOutTheGracePeriodWhenTheActivatorOnlyNowEntersThePath) {
  // Target burst capacity 0: the activator is in the path only while the want is 0, so it
  // enters at t=119 and the last instance stays until it has proxied for the 30 s grace.
  KpaParams p;
  p.target_burst_capacity = 0;
  KpaPolicy kpa{p};
  ExpectLastInstanceHeldThrough(kpa, 148);
}

TEST(KpaPolicy, TheGraceCountsFromWhenTheActivatorEnteredThePath) {
  // Limit 100 per instance, 10 concurrent on 4 ready: 4 * 100 - 211 - 10 >= 0, so the
  // activator is out of the path. Down to one ready instance at t=101 (1 * 100 - 211 < 0) it
  // enters; the window empties at t=119, 18 s later, so the last instance stays the remaining
  // 12 s of the grace, not 30.
  KpaPolicy kpa{KpaParams{}};
  auto sig = [](double t, uint32_t c, uint32_t ready) {
    FunctionSignals s = Sig(t, c, ready);
    s.concurrency = 100;
    return s;
  };
  for (int t = 0; t < 60; ++t) kpa.Observe(sig(t, 10, 4));
  for (int t = 60; t <= 118; ++t)
    ASSERT_GE(kpa.Observe(sig(t, 0, t <= 100 ? 4 : 1)).replicas, 1u) << "t=" << t;
  for (int t = 119; t <= 130; ++t) ASSERT_EQ(kpa.Observe(sig(t, 0, 1)).replicas, 1u) << t;
  EXPECT_EQ(kpa.Observe(sig(131, 0, 1)).replicas, 0u);
}

TEST(KpaPolicy, PodRetentionKeepsTheLastInstanceAtLeastThatLong) {
  KpaParams p;
  p.scale_to_zero_pod_retention_s = 45;
  KpaPolicy kpa{p};
  // Inactive from t=119: held for max(grace 30, retention 45) = 45 s.
  ExpectLastInstanceHeldThrough(kpa, 163);
}

TEST(KpaPolicy, APodAutoscalerActiveLessThanAStableWindowKeepsOne) {
  // Stable window and grace 10 s, no panic. A request waits at t=0 and t=1 with nothing
  // ready; from t=2 an instance is ready (the PA active from then) and the request is gone.
  // The t=1 bucket leaves the window at t=11: the decider says 0, but the PA has been active
  // only 9 s, so one instance stays; at t=12 (active 10 s) it goes inactive and, the activator
  // having been in the path since t=0, longer than the grace, the instance goes at once.
  KpaParams p;
  p.stable_window_s = 10;
  p.scale_to_zero_grace_period_s = 10;
  p.panic_threshold_percentage = 1000;
  KpaPolicy kpa{p};
  FunctionSignals q = Sig(0, 0, 0);
  q.queued = 1;
  EXPECT_EQ(kpa.Observe(q).replicas, 2u);  // ceil(1 / 0.7)
  q.now_s = 1;
  EXPECT_EQ(kpa.Observe(q).replicas, 2u);
  for (int t = 2; t <= 10; ++t) ASSERT_GE(kpa.Observe(Sig(t, 0, 1)).replicas, 1u) << t;
  EXPECT_EQ(kpa.Observe(Sig(11, 0, 1)).replicas, 1u);
  EXPECT_EQ(kpa.Observe(Sig(12, 0, 1)).replicas, 0u);
}

// Stable window 4 s, grace 1 s, no panic: active on 3 ready from t=0, then at t=4 the
// instances are gone while the demand still wants them (activating), and none is ready
// through t=20 while the demand falls to 0.
KpaPolicy ActivatingWhenTheDemandEnds(double activation_timeout_s) {
  KpaParams p;
  p.stable_window_s = 4;
  p.scale_to_zero_grace_period_s = 1;
  p.panic_threshold_percentage = 1000;
  p.activation_timeout_s = activation_timeout_s;
  KpaPolicy kpa{p};
  for (int t = 0; t <= 3; ++t) kpa.Observe(Sig(t, 3, 3));
  EXPECT_GE(kpa.Observe(Sig(4, 3, 0)).replicas, 1u);
  for (int t = 5; t <= 20; ++t) EXPECT_GE(kpa.Observe(Sig(t, 0, 0)).replicas, 1u) << "t=" << t;
  return kpa;
}

TEST(KpaPolicy, AnActivatingFunctionWhoseDemandEndedGoesActiveThenToZero) {
  // kpa.go's table: an unknown want with an instance ready marks an activating PA active, so
  // the last instance goes a stable window later (the cluster's leader once held one for good
  // when its decision fell to 0 while the nodes reported none ready).
  KpaPolicy kpa = ActivatingWhenTheDemandEnds(630);
  // t=21: the held scale, want unknown, marked active; then one kept for the stable window.
  EXPECT_GE(kpa.Observe(Sig(21, 0, 1)).replicas, 1u);
  for (int t = 22; t <= 24; ++t) ASSERT_EQ(kpa.Observe(Sig(t, 0, 1)).replicas, 1u) << "t=" << t;
  EXPECT_EQ(kpa.Observe(Sig(25, 0, 1)).replicas, 0u);
  EXPECT_EQ(kpa.Observe(Sig(26, 0, 0)).replicas, 0u);
}

TEST(KpaPolicy, AnActivationThatNeverSucceedsGoesToZeroAfterTheActivationTimeout) {
  // Activating since t=4 with nothing ever ready: held until t=4+30, then 0.
  KpaPolicy kpa = ActivatingWhenTheDemandEnds(30);
  for (int t = 21; t <= 33; ++t) ASSERT_GE(kpa.Observe(Sig(t, 0, 0)).replicas, 1u) << "t=" << t;
  EXPECT_EQ(kpa.Observe(Sig(34, 0, 0)).replicas, 0u);
  EXPECT_EQ(kpa.Observe(Sig(35, 0, 0)).replicas, 0u);
}

TEST(KpaPolicy, TrafficDuringTheGracePeriodCancelsScaleToZero) {
  KpaPolicy kpa{KpaParams{}};
  uint32_t ready = 1;
  kpa.Observe(Sig(0, 0, 1));  // desired 0 from here; grace running
  for (int t = 1; t < 20; ++t) ready = kpa.Observe(Sig(t, 0, ready)).replicas;
  EXPECT_EQ(ready, 1u);
  ready = kpa.Observe(Sig(20, 1, ready)).replicas;  // traffic
  EXPECT_GE(ready, 1u);
  for (int t = 21; t <= 60; ++t) ready = kpa.Observe(Sig(t, 0, ready)).replicas;
  EXPECT_EQ(ready, 1u);  // the window still holds t=20's sample, so desired >= 1
}

TEST(KpaPolicy, ClampsToMinAndMaxScale) {
  KpaPolicy kpa{KpaParams{}};
  FunctionSignals s = Sig(0, 10, 5);
  s.max_scale = 5;
  EXPECT_EQ(kpa.Observe(s).replicas, 5u);
  KpaPolicy idle{KpaParams{}};
  FunctionSignals z = Sig(0, 0, 0);
  z.min_scale = 2;
  EXPECT_EQ(idle.Observe(z).replicas, 2u);
}

TEST(KpaPolicy, IrregularObservationIntervalsWeighByTimeCovered) {
  // Every second: 10 at t=2, then 20 at t=3, 4, 5.
  KpaPolicy regular{KpaParams{}};
  regular.Observe(Sig(2, 10, 25));
  for (int t = 3; t <= 5; ++t) regular.Observe(Sig(t, 20, 25));
  // Irregular: 10 at t=2, then one sample of 20 at t=5 covering (2, 5].
  KpaPolicy irregular{KpaParams{}};
  irregular.Observe(Sig(2, 10, 25));
  FunctionSignals late = Sig(5, 20, 25);
  late.interval_s = 3;
  ScalingDecision d = irregular.Observe(late);
  // (10 + 3*20) / 4 buckets = 17.5; ceil(17.5/0.7) = 25 (not 26 from rounding dust).
  EXPECT_DOUBLE_EQ(regular.stable_average(), 17.5);
  EXPECT_DOUBLE_EQ(irregular.stable_average(), 17.5);
  EXPECT_DOUBLE_EQ(irregular.panic_average(), 17.5);
  EXPECT_EQ(d.replicas, 25u);
  // Sub-second samples share a bucket: 10 and 30 at t=7.2 and 7.7 average to 20 there.
  KpaPolicy fine{KpaParams{}};
  fine.Observe(Sig(7.2, 10, 30));
  fine.Observe(Sig(7.7, 30, 30));
  EXPECT_DOUBLE_EQ(fine.stable_average(), 20.0);
}

TEST(KpaPolicy, FactoryValidatesAndNamesTheParameter) {
  PolicyParams p;
  auto ok = MakeScalingPolicy("kpa", p);
  ASSERT_TRUE(ok.ok());
  EXPECT_STREQ((*ok)->name(), "kpa");
  p.kpa.stable_window_s = -1;
  auto bad = MakeScalingPolicy("kpa", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("kpa.stable_window_s"), std::string::npos);
  p.kpa.stable_window_s = 60;
  p.kpa.target_burst_capacity = -2;
  bad = MakeScalingPolicy("kpa", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kpa.target_burst_capacity must be >= 0 or -1"),
            std::string::npos)
      << bad.status().message();
  p.kpa.target_burst_capacity = -1;
  p.kpa.scale_to_zero_pod_retention_s = -1;
  bad = MakeScalingPolicy("kpa", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kpa.scale_to_zero_pod_retention_s"), std::string::npos)
      << bad.status().message();
  p.kpa.scale_to_zero_pod_retention_s = 0;
  p.kpa.activation_timeout_s = 0;
  bad = MakeScalingPolicy("kpa", p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kpa.activation_timeout_s"), std::string::npos)
      << bad.status().message();
  auto unknown = MakeScalingPolicy("hpa", PolicyParams{});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("hpa"), std::string::npos);
}

}  // namespace
}  // namespace shoal
