// The scenarios' comparison: three ratios, none picked, and a combined score that falls when
// any of them worsens. The KPA baseline's scale-to-zero on a timer just past the stable window.
#include "shoal/tools/scenarios/scenarios.h"

#include <gtest/gtest.h>

#include <cmath>

namespace shoal {
namespace {

ScenarioResult Row(const std::string& workload, const std::string& policy, uint64_t cold,
                   double inst_s, double p99_s) {
  ScenarioResult r;
  r.workload = workload;
  r.policy = policy;
  r.report.total.cold_requests = cold;
  r.report.total.instance_s = inst_s;
  r.report.total.p99_latency_s = p99_s;
  return r;
}

TEST(CompareScenarios, ThreeRatiosAndTheirCombinedScore) {
  std::vector<ScenarioResult> rs = {Row("a", "kpa", 20, 100, 2.0), Row("a", "shoal", 5, 50, 1.0)};
  ScenarioComparison c = CompareScenarios(rs, "shoal", "kpa");
  EXPECT_EQ(c.workloads, 1);
  EXPECT_DOUBLE_EQ(c.cold, 0.25);
  EXPECT_DOUBLE_EQ(c.instance_s, 0.5);
  EXPECT_DOUBLE_EQ(c.p99, 0.5);
  EXPECT_NEAR(c.score, std::cbrt(16.0), 1e-12);  // (0.25 * 0.5 * 0.5)^(-1/3)
  // Better on instance-seconds but worse on p99: the score falls.
  rs[1].report.total.instance_s = 25;
  rs[1].report.total.p99_latency_s = 4.0;
  const ScenarioComparison worse = CompareScenarios(rs, "shoal", "kpa");
  EXPECT_DOUBLE_EQ(worse.instance_s, 0.25);
  EXPECT_DOUBLE_EQ(worse.p99, 2.0);
  EXPECT_NEAR(worse.score, std::cbrt(8.0), 1e-12);
  EXPECT_LT(worse.score, c.score);
  const std::string line = FormatScenarioComparison(worse, "shoal", "kpa");
  EXPECT_NE(line.find("cold-start requests 0.250x, instance-seconds 0.250x, p99 2.000x"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("combined score (cold * inst-s * p99)^(-1/3) = 2.000"), std::string::npos)
      << line;
}

TEST(CompareScenarios, GeometricMeanOverWorkloadsAndNoColdStartsCountAsOne) {
  std::vector<ScenarioResult> rs = {Row("a", "kpa", 0, 100, 1.0), Row("a", "shoal", 0, 400, 1.0),
                                    Row("b", "kpa", 8, 100, 1.0), Row("b", "shoal", 2, 25, 1.0),
                                    Row("c", "shoal", 1, 1, 1.0)};  // no baseline: left out
  const ScenarioComparison c = CompareScenarios(rs, "shoal", "kpa");
  EXPECT_EQ(c.workloads, 2);
  EXPECT_DOUBLE_EQ(c.cold, 0.5);        // sqrt(1 * 0.25)
  EXPECT_DOUBLE_EQ(c.instance_s, 1.0);  // sqrt(4 * 0.25)
  EXPECT_DOUBLE_EQ(c.p99, 1.0);
}

TEST(RunScenario, KpaScalesATimerJustPastTheStableWindowToZeroEveryPeriod) {
  // 20 timers with periods 45 + 45 * i / 19 s (jitter 1 s). Knative with its defaults keeps an
  // instance while the 60 s stable window holds a request and lets it go as the window empties
  // (the activator was in the path all along): periods up to ~57 s stay warm after their first
  // call, periods from ~66 s are cold on every call. (The old fixed 30 s grace kept all 20
  // warm.)
  ScenarioOptions o;
  o.workload = "timer";
  o.policy = "kpa";
  auto r = RunScenario(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->report.functions.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    const FunctionReport& f = r->report.functions[i];
    const uint64_t later = f.cold_requests - f.first_cold_requests;
    const double period = 45 + 45.0 * i / 19.0;
    ASSERT_GT(f.requests, 30u) << f.name;
    if (period <= 57) {
      EXPECT_EQ(later, 0u) << f.name << " period " << period;
    } else if (period >= 66) {
      EXPECT_EQ(later + 1, f.requests) << f.name << " period " << period;
    }
  }
}

}  // namespace
}  // namespace shoal
