// An FL job's progress toward its stop condition, read from its status JSON
// (GET /v1/jobs/JOB), and the three ways `shoal fl watch` shows it: a block redrawn on a
// terminal, a plain line, a JSON object.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace shoal::cli {

struct FlJobProgress {
  std::string name, algorithm, state;
  uint64_t version = 0;
  uint64_t target_rounds = 0;  // spec.stop.rounds; 0: none
  double target_accuracy = 0;  // spec.stop.accuracy; 0: none
  uint64_t clients_joined = 0, clients_expected = 0;
  std::optional<double> best_accuracy;
  // The newest version with an evaluation, and its accuracy and loss.
  std::optional<uint64_t> evaluated_version;
  std::optional<double> accuracy, loss;
  double elapsed_s = 0;
  double commits_per_min = 0;      // versions committed over the last minute of the job
  std::optional<double> fraction;  // toward the stop condition; none: the job has none
  std::optional<double> eta_s;     // none: no rate to extrapolate yet

  bool done() const { return state == "done"; }
  bool failed() const { return state != "done" && state != "running"; }
};

// `status` is the job's status JSON. The fraction is the larger of best/target accuracy and
// version/rounds (whichever comes first stops the job), 1 once done. The ETA is the sooner of
// the rounds left at the recent commit rate and the accuracy left at its recent gain per second
// (over the last few evaluated versions).
FlJobProgress JobProgress(const nlohmann::json& status);

// The terminal block: the job, the bar with its percentage and target, the latest numbers.
std::vector<std::string> ProgressBlock(const FlJobProgress& p, int width);
// One plain line (no escapes).
std::string ProgressLine(const FlJobProgress& p);
nlohmann::json ProgressJson(const FlJobProgress& p);
// "fljob/J done: version V, best accuracy A (target T), 12.3s".
std::string DoneLine(const FlJobProgress& p);

}  // namespace shoal::cli
