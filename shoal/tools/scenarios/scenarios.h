// Named, seeded autoscaling scenarios: a workload (bursty, diurnal, timer-heavy, FL rounds, a
// Zipf mix of many functions, or a replayed trace) run in the simulator under a named policy
// (kpa, rl-q, shoal). Shared by bench-autoscale and `shoal sim`, so both print the same thing.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/tools/simulator/simulator.h"

namespace shoal {

inline constexpr const char* kScenarioWorkloads[] = {"bursty", "diurnal", "timer", "fl", "zipf"};
inline constexpr const char* kScenarioPolicies[] = {"kpa", "rl-q", "shoal", "learned"};
// Generator families for training the learned policy (workload "gen-<family>"): each seed draws
// its own functions and parameters. The five workloads above are the evaluation set.
inline constexpr const char* kWorkloadFamilies[] = {"poisson", "diurnal", "zipf", "timer",
                                                    "bursty",  "fl",      "azure"};

struct ScenarioOptions {
  std::string workload;    // one of kScenarioWorkloads, or "trace"
  std::string policy;      // one of kScenarioPolicies
  std::string trace_path;  // for workload "trace": per-invocation CSV or Azure 2019 counts
  uint64_t seed = 42;
  double duration_scale = 1.0;  // shortens or lengthens the workload (tests use < 1)
  // kpa and rl-q: an idle keep-alive for instances above the decided scale (KPA + K s
  // keep-alive; negative: Knative's none). The row's policy reads "kpa+<K>s".
  double keep_alive_s = -1;
  // Extra manifest params (e.g. costWeight for the learned policy's frontier).
  std::map<std::string, double> params;
  std::shared_ptr<const LearnedModel> learned_model;  // learned: this table, not the shipped one
  std::vector<IdlePeriod>* idle_periods = nullptr;    // learned: collects every idle period
  int sizing_action = -1;  // learned: every interval runs this sizing action (training)
  // learned: each function's interval outcomes, with the sizing context and action in force;
  // resized to one vector per function, in the order of the report's functions.
  std::vector<std::vector<SizingSample>>* sizing_samples = nullptr;
  std::string label;  // the row's policy name (default: policy)
};

struct ScenarioResult {
  std::string workload, policy;
  SimulationReport report;
  double slo_s = 0;
};

Result<ScenarioResult> RunScenario(const ScenarioOptions& options);

// The table both tools print: one row per result, ratios against the row of `baseline_policy`
// of the same workload (cold starts, instance-seconds, p99; lower is better).
std::string FormatScenarioTable(const std::vector<ScenarioResult>& results,
                                const std::string& baseline_policy);

// A policy against the baseline, geometric means over the workloads both ran: each ratio is
// policy / baseline (lower is better for the policy). Cold-start requests count at least 1 on
// each side, so a workload where both have none reads 1. `score` is the geometric mean of the
// three inverted ratios, (cold * instance_s * p99)^(-1/3): above 1 the policy is better, and
// it falls whenever any of the three worsens.
struct ScenarioComparison {
  int workloads = 0;
  double cold = 1, instance_s = 1, p99 = 1;
  double score = 1;
};
ScenarioComparison CompareScenarios(const std::vector<ScenarioResult>& results,
                                    const std::string& policy, const std::string& baseline);
std::string FormatScenarioComparison(const ScenarioComparison& c, const std::string& policy,
                                     const std::string& baseline);

}  // namespace shoal
