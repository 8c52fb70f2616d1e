// Training the learned policy in the simulator: the same seed gives the same file, byte for
// byte; another seed another one; the generator families are seeded and refuse unknown names;
// training covers every idle period it simulated.
#include "shoal/tools/scenarios/learned_training.h"

#include <gtest/gtest.h>

namespace shoal {
namespace {

TrainOptions Small(uint64_t seed) {
  TrainOptions t;
  t.families = {"timer", "poisson", "azure"};
  t.seed = seed;
  t.seeds = 2;
  t.duration_scale = 0.25;
  return t;
}

TEST(TrainLearnedPolicy, DeterministicForAFixedSeed) {
  size_t idle_calls = 0, sizing_calls = 0;
  TrainOptions t = Small(1000);
  t.progress = [&](size_t done, size_t total, const std::string& what) {
    // First the idle table (6 runs), then the sizing table (each run once per sizing action).
    if (what.rfind("sizing ", 0) == 0) {
      ++sizing_calls;
      EXPECT_EQ(total, 72u);
      EXPECT_EQ(done, sizing_calls);
    } else {
      ++idle_calls;
      EXPECT_EQ(total, 6u);
      EXPECT_EQ(done, idle_calls);
    }
  };
  auto a = TrainLearnedPolicy(t);
  auto b = TrainLearnedPolicy(Small(1000));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(idle_calls, 6u);
  EXPECT_EQ(sizing_calls, 72u);
  EXPECT_EQ(a->runs, 6u);
  EXPECT_EQ(a->sizing_runs, 72u);
  EXPECT_GT(a->model.samples(), 100u);
  EXPECT_EQ(a->model.samples(), a->periods.size());
  // Every function's intervals, charged once per action: a multiple of the action count.
  EXPECT_GT(a->model.sizing().samples(), 1000u);
  EXPECT_EQ(a->model.sizing().samples() % 12, 0u);
  const std::string bytes = a->model.Serialize();
  EXPECT_EQ(bytes, b->model.Serialize());
  EXPECT_NE(bytes.find("\"trained_on\": \"timer, poisson, azure (seeds 1000..1001"),
            std::string::npos);
  EXPECT_NE(bytes.find("sizing: seeds 1000..1001 x 12 actions"), std::string::npos);
  auto c = TrainLearnedPolicy(Small(2000));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->model.Serialize(), bytes);
  // No sizing seeds: an empty sizing table (every context keeps the default sizing).
  TrainOptions none = Small(1000);
  none.sizing_seeds = 0;
  auto d = TrainLearnedPolicy(none);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->sizing_runs, 0u);
  EXPECT_EQ(d->model.sizing().samples(), 0u);
}

TEST(LearnedRunCost, OneSizingActionForEveryIntervalChangesTheRunsCost) {
  ScenarioOptions o;
  o.workload = "gen-bursty";
  o.seed = 42;
  o.duration_scale = 0.25;
  const LearnedWeights w;
  auto model = LearnedModel::Default();
  auto def = LearnedRunCost(o, model, static_cast<int>(SizingTable::kDefaultAction), w);
  auto wide = LearnedRunCost(o, model, 11, w);  // x1.30, hold 60 s
  ASSERT_TRUE(def.ok() && wide.ok());
  EXPECT_GT(wide->cost.instance_s, def->cost.instance_s);
  EXPECT_LE(wide->cost.cold_requests, def->cost.cold_requests);
  EXPECT_DOUBLE_EQ(def->weighted, w.cost_weight * def->cost.instance_s +
                                      w.cold_weight * def->cost.cold_requests +
                                      w.miss_weight * def->cost.slo_misses);
}

TEST(TrainLearnedPolicy, RefusesUnknownFamiliesAndNoSeeds) {
  TrainOptions t = Small(1);
  t.families = {"timer", "nope"};
  auto r = TrainLearnedPolicy(t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "workload family 'nope' unknown: poisson, diurnal, zipf, timer, bursty, fl, azure");
  t = Small(1);
  t.seeds = 0;
  EXPECT_EQ(TrainLearnedPolicy(t).status().message(), "seeds must be >= 1");
}

TEST(WorkloadFamilies, SeedsDrawDifferentWorkloadsAndTheSameSeedTheSame) {
  for (const char* family : kWorkloadFamilies) {
    ScenarioOptions o;
    o.workload = std::string("gen-") + family;
    o.policy = "kpa";
    o.duration_scale = 0.25;
    o.seed = 5;
    auto a = RunScenario(o);
    auto b = RunScenario(o);
    o.seed = 6;
    auto c = RunScenario(o);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << family;
    EXPECT_GT(a->report.total.requests, 0u) << family;
    EXPECT_EQ(a->report.total.requests, b->report.total.requests) << family;
    EXPECT_DOUBLE_EQ(a->report.total.instance_s, b->report.total.instance_s) << family;
    EXPECT_NE(a->report.total.requests, c->report.total.requests) << family;
  }
}

// On the held-out timer workload of the bench (periods 45..90 s), the shipped policy has far
// fewer cold starts after the first instance than KPA with a 60 s keep-alive on the same
// arrivals, for less instance time.
TEST(LearnedPolicy, BeatsKpaWithAMinuteKeepAliveOnTimersAroundTheMinute) {
  ScenarioOptions o;
  o.workload = "timer";
  o.seed = 42;
  o.policy = "kpa";
  o.keep_alive_s = 60;
  auto kpa = RunScenario(o);
  o.policy = "learned";
  o.keep_alive_s = -1;
  auto learned = RunScenario(o);
  ASSERT_TRUE(kpa.ok() && learned.ok());
  EXPECT_EQ(kpa->policy, "kpa+60s");
  const auto later = [](const FunctionReport& t) {
    return t.cold_requests - t.first_cold_requests;
  };
  EXPECT_GT(later(kpa->report.total), 500u);
  EXPECT_LT(later(learned->report.total), 10u);
  EXPECT_LT(learned->report.total.instance_s, 0.5 * kpa->report.total.instance_s);
}

}  // namespace
}  // namespace shoal
