// Named, seeded autoscaling scenarios: a workload (bursty, diurnal, timer-heavy, FL rounds, a
// Zipf mix of many functions, or a replayed trace) run in the simulator under a named policy
// (kpa, rl-q, shoal). Shared by bench-autoscale and `shoal sim`, so both print the same thing.
#pragma once

#include <string>
#include <vector>

#include "shoal/autoscaler/simulator.h"
#include "shoal/common/status.h"

namespace shoal {

inline constexpr const char* kScenarioWorkloads[] = {"bursty", "diurnal", "timer", "fl", "zipf"};
inline constexpr const char* kScenarioPolicies[] = {"kpa", "rl-q", "shoal"};

struct ScenarioOptions {
  std::string workload;   // one of kScenarioWorkloads, or "trace"
  std::string policy;     // one of kScenarioPolicies
  std::string trace_path; // for workload "trace": per-invocation CSV or Azure 2019 counts
  uint64_t seed = 42;
  double duration_scale = 1.0;  // shortens or lengthens the workload (tests use < 1)
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

}  // namespace shoal
