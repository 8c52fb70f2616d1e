// Offline training of the learned policy in the simulator (`shoal sim train`), and the figures
// that say whether it generalises: the weighted idle cost of its choices against a fixed 60 s
// keep-alive, on the training runs and on runs it never saw (other seeds, held-out families).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/tools/scenarios/scenarios.h"

namespace shoal {

// The families training uses by default; fl and zipf are held out for evaluation.
inline constexpr const char* kTrainingFamilies[] = {"poisson", "diurnal", "timer", "bursty",
                                                    "azure"};

struct TrainOptions {
  std::vector<std::string> families{std::begin(kTrainingFamilies), std::end(kTrainingFamilies)};
  uint64_t seed = 1000;  // family f's runs use seeds seed .. seed + seeds - 1
  int seeds = 16;
  // The busy-time sizing table: trained on the same families at the first sizing_seeds seeds,
  // each run simulated once per sizing action; 0 leaves the table empty.
  int sizing_seeds = 8;
  double duration_scale = 1.0;
  // Called after each simulated run: (runs done, runs in all, what just ran).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct TrainResult {
  LearnedModel model;
  std::vector<IdlePeriod> periods;  // what it was trained on
  size_t runs = 0;
  size_t sizing_runs = 0;
};

// Deterministic: the same options give the same model, byte for byte once serialised. The
// behaviour policy is an empty table (keep 60 s everywhere): idle periods end with arrivals the
// autoscaler does not influence, so what it did during them does not bias the table.
Result<TrainResult> TrainLearnedPolicy(const TrainOptions& options);

// Every idle period of a workload run under the learned policy with `model`.
Result<std::vector<IdlePeriod>> CollectIdlePeriods(ScenarioOptions options,
                                                   std::shared_ptr<const LearnedModel> model);

// Mean weighted cost per idle period of the model's choices, and of one fixed action, on a set.
struct IdleCost {
  size_t periods = 0;
  double learned = 0, keep60 = 0;
  double ratio() const { return keep60 > 0 ? learned / keep60 : 1; }
};
IdleCost EvaluateIdleCost(const LearnedModel& model, const std::vector<IdlePeriod>& periods,
                          const LearnedWeights& weights);

// Trains `model`'s sizing table in place (its idle table is what the runs use while idle).
Status TrainSizing(const TrainOptions& options, LearnedModel* model, size_t* runs);

// Weighted cost of a whole simulated run (instance-seconds, cold-start requests, SLO misses,
// with the weights) under the learned policy: the model's sizing table, or one sizing action
// for every interval (`sizing_action` >= 0; SizingTable::kDefaultAction is shoal's sizing).
struct RunCost {
  SizingCost cost;
  double weighted = 0;
};
Result<RunCost> LearnedRunCost(ScenarioOptions options, std::shared_ptr<const LearnedModel> model,
                               int sizing_action, const LearnedWeights& weights);

}  // namespace shoal

namespace shoal {

// `shoal sim train`: trains with a progress bar on stderr, writes the file, then prints the
// generalisation table (idle cost against keep-60 on the training runs, on the training
// families at evaluation seeds, on held-out families, and on the bench's five workloads).
struct TrainCommand {
  TrainOptions train;
  std::string out_path = "deploy/policies/learned-v2.json";
  uint64_t eval_seed = 42;
  bool evaluate = true;
};
int RunTrainCommand(const TrainCommand& command);

}  // namespace shoal
