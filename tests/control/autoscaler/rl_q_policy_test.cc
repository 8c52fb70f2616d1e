// RL-Q: the Q-learning update on hand-computed steps, epsilon decay, the reward, determinism,
// and convergence to the best concurrency target in a toy environment where it is known.
#include "shoal/control/autoscaler/rl_q_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "signals_for_test.h"

namespace shoal {
namespace {

using testing::Interval;

TEST(RlQPolicy, UpdateRuleMatchesHandComputedSteps) {
  RlQParams p;
  p.alpha = 0.5;
  p.gamma = 0.9;
  RlQPolicy q(p);
  const size_t s0 = q.StateIndex(2, 3), s1 = q.StateIndex(2, 4);
  // Q(s0,raise) = 0 + 0.5 * (1 + 0.9 * 0 - 0) = 0.5
  EXPECT_DOUBLE_EQ(q.Update(s0, RlQPolicy::kRaise, 1.0, s1), 0.5);
  // Q(s1,keep) = 0 + 0.5 * (2 + 0.9 * max Q(s0,.) = 0.45 - 0) = 1.225
  EXPECT_DOUBLE_EQ(q.Update(s1, RlQPolicy::kKeep, 2.0, s0), 1.225);
  // Q(s0,raise) = 0.5 + 0.5 * (1 + 0.9 * 1.225 - 0.5) = 1.30125
  EXPECT_DOUBLE_EQ(q.Update(s0, RlQPolicy::kRaise, 1.0, s1), 1.30125);
  EXPECT_DOUBLE_EQ(q.q(s0, RlQPolicy::kRaise), 1.30125);
  EXPECT_DOUBLE_EQ(q.q(s0, RlQPolicy::kLower), 0.0);
  EXPECT_EQ(q.GreedyAction(s0), RlQPolicy::kRaise);
  EXPECT_EQ(q.GreedyAction(q.StateIndex(0, 0)), RlQPolicy::kKeep);  // all zero: keep
  EXPECT_EQ(q.q_table().size(), q.num_states() * 3);
  EXPECT_EQ(q.num_states(), 10u * 7u);
}

TEST(RlQPolicy, EpsilonDecaysGeometricallyToItsFloor) {
  RlQParams p;
  p.epsilon = 1.0;
  p.epsilon_decay = 0.5;
  p.epsilon_min = 0.1;
  RlQPolicy q(p);
  const double expected[] = {0.5, 0.25, 0.125, 0.1, 0.1};
  for (double e : expected) {
    q.ChooseAction(0);
    EXPECT_DOUBLE_EQ(q.epsilon(), e);
  }
}

TEST(RlQPolicy, RewardWeighsSloColdStartsAndInstances) {
  RlQPolicy q{RlQParams{}};
  RlQPolicy::IntervalStats st;
  st.elapsed_s = 10;
  st.arrivals = 100;
  st.completions = 100;
  st.worst_p99_s = 2.0;
  st.slo_s = 1.0;
  st.cold_starts = 2;
  st.instance_seconds = 30;
  // 1 * (1/2) - 0.05 * 2 - 0.01 * 3 = 0.37
  EXPECT_NEAR(q.Reward(st), 0.37, 1e-12);
  st.worst_p99_s = 0.5;
  st.completions = 50;  // half served
  EXPECT_NEAR(q.Reward(st), 0.5 - 0.1 - 0.03, 1e-12);
}

TEST(RlQPolicy, LoadBinsAndCheckpoints) {
  RlQPolicy q{RlQParams{}};
  EXPECT_EQ(q.LoadBin(0), 0u);
  EXPECT_EQ(q.LoadBin(1), 0u);
  EXPECT_EQ(q.LoadBin(1.5), 1u);
  EXPECT_EQ(q.LoadBin(20), 4u);
  EXPECT_EQ(q.LoadBin(1e6), 9u);
  std::vector<double> t(q.q_table().size(), 0.0);
  t[5] = 3.5;
  ASSERT_TRUE(q.LoadQTable(t).ok());
  EXPECT_DOUBLE_EQ(q.q(1, 2), 3.5);
  EXPECT_FALSE(q.LoadQTable(std::vector<double>(3)).ok());
}

// Toy environment: 20 concurrent requests; per-instance load 20/replicas; p99 = 0.1 s * (1 +
// load) against a 1 s SLO. Replicas = ceil(20 / (target * 0.7)); rewards per target
// (1 - 0.01 * replicas, or scaled by SLO/p99 when violated):
//   1: 29 -> 0.71   2: 15 -> 0.85   5: 6 -> 0.94   10: 3 -> 0.97   20: 2 -> 0.889
//   50 and 100: 1 -> 0.466.  The best target is 10.
void RunToy(RlQPolicy& pol, int steps) {
  uint32_t replicas = 3, prev = 3;
  for (int k = 0; k < steps; ++k) {
    FunctionSignals s = Interval(k, 1, 100, 0);
    s.inflight = 20;
    s.ready = replicas;
    s.slo_s = 1.0;
    s.arrivals = s.completions = 100;
    s.cold_starts = replicas > prev ? replicas - prev : 0;
    s.p99_latency_s = 0.1 * (1 + 20.0 / replicas);
    ScalingDecision d = pol.Observe(s);
    prev = replicas;
    replicas = std::max<uint32_t>(1, d.replicas);
  }
}

RlQParams ToyParams(uint64_t seed) {
  RlQParams p;
  p.alpha = 0.5;
  p.gamma = 0.9;
  p.epsilon = 1.0;
  p.epsilon_decay = 0.999;
  p.epsilon_min = 0.05;
  p.decision_interval_s = 1;
  p.seed = seed;
  p.kpa.panic_threshold_percentage = 1e6;  // isolate the learning from KPA's panic mode
  p.kpa.max_scale_down_rate = 1e9;
  return p;
}

TEST(RlQPolicy, ConvergesToTheBestTargetInAToyEnvironment) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    RlQPolicy pol(ToyParams(seed));
    RunToy(pol, 5000);
    EXPECT_EQ(pol.decisions(), 4999u);
    const size_t load_bin = pol.LoadBin(20);
    // From every target, following the greedy actions reaches 10 and stays there.
    for (size_t start = 0; start < 7; ++start) {
      size_t t = start;
      for (int step = 0; step < 10; ++step) {
        const int a = pol.GreedyAction(pol.StateIndex(load_bin, t));
        if (a == RlQPolicy::kLower && t > 0) --t;
        if (a == RlQPolicy::kRaise && t < 6) ++t;
      }
      EXPECT_EQ(t, 3u) << "seed " << seed << " start " << start;
    }
    EXPECT_EQ(pol.GreedyAction(pol.StateIndex(load_bin, 3)), RlQPolicy::kKeep);
  }
}

TEST(RlQPolicy, DeterministicFromTheSeed) {
  RlQPolicy a(ToyParams(42)), b(ToyParams(42)), c(ToyParams(43));
  RunToy(a, 500);
  RunToy(b, 500);
  RunToy(c, 500);
  EXPECT_EQ(a.q_table(), b.q_table());
  EXPECT_NE(a.q_table(), c.q_table());
}

TEST(RlQPolicy, DecidesOncePerDecisionInterval) {
  RlQParams p;
  p.decision_interval_s = 30;
  RlQPolicy pol(p);
  FunctionSignals s;
  s.concurrency = 100;
  s.max_scale = 0;
  s.inflight = 5;
  for (int t = 0; t <= 90; ++t) {
    s.now_s = t;
    s.interval_s = 1;
    ScalingDecision d = pol.Observe(s);
    EXPECT_DOUBLE_EQ(d.concurrency_target, pol.target());
  }
  EXPECT_EQ(pol.decisions(), 3u);  // at t = 30, 60, 90
  EXPECT_LT(pol.epsilon(), 1.0);
}

}  // namespace
}  // namespace shoal
