// `shoal sim`: runs the autoscaling simulator locally (no shoald needed) with a named policy on
// a named workload or a replayed trace, and prints the same table as bench-autoscale, with the
// KPA baseline (Knative's defaults) run on the same arrivals for the ratios, and the three
// ratios' combined score.
#include "shoal/cli/sim.h"

#include <algorithm>
#include <cstdio>

#include "shoal/tools/scenarios/learned_training.h"
#include "shoal/tools/scenarios/scenarios.h"

namespace shoal::cli {

int Simulate(const SimOptions& o) {
  std::vector<ScenarioResult> results;
  std::vector<std::string> policies = {o.policy};
  if (o.policy != "kpa") policies.insert(policies.begin(), "kpa");  // the baseline for ratios
  for (size_t i = 0; i < policies.size(); ++i) {
    ScenarioOptions s;
    s.workload = o.trace.empty() ? o.workload : "trace";
    s.trace_path = o.trace;
    s.policy = policies[i];
    s.seed = o.seed;
    s.duration_scale = o.duration_scale;
    std::fprintf(stderr, "[%zu/%zu] simulating %s under %s ...\n", i + 1, policies.size(),
                 s.workload.c_str(), s.policy.c_str());
    auto r = RunScenario(s);
    if (!r.ok()) {
      std::fprintf(stderr, "shoal sim: %s\n", r.status().message().c_str());
      return 1;
    }
    results.push_back(std::move(*r));
  }
  std::printf("%s", FormatScenarioTable(results, "kpa").c_str());
  if (o.policy != "kpa") {
    std::printf(
        "%s", FormatScenarioComparison(CompareScenarios(results, o.policy, "kpa"), o.policy, "kpa")
                  .c_str());
  }
  return 0;
}

int SimTrain(const SimTrainOptions& o) {
  TrainCommand c;
  c.out_path = o.out;
  c.train.seed = o.seed;
  c.train.seeds = o.seeds;
  c.train.sizing_seeds = o.sizing_seeds;
  c.train.duration_scale = o.duration_scale;
  c.evaluate = o.evaluate;
  if (!o.families.empty()) {
    c.train.families.clear();
    size_t pos = 0;
    while (pos <= o.families.size()) {
      const size_t comma = std::min(o.families.find(',', pos), o.families.size());
      c.train.families.push_back(o.families.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  return RunTrainCommand(c);
}

}  // namespace shoal::cli
