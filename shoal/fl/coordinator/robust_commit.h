// The robust commit path of an FL job (spec.aggregation.robust): instead of adding the leaves'
// partial sums, the coordinator runs the job's robust rule (shoal/fl/robust) over the round's
// individual updates where they sit in the job's pool (the coordinator holds every acknowledged
// update's buffer until the checkpoint of its version is written, robust or not), and the
// algorithm's final step then takes the rule's result in place of the weighted mean.
//
// Why at the top: Krum and Flag compare every pair of updates, and median and trimmed mean sort
// every coordinate over all updates; none of them splits into sums that leaves holding
// different updates could fold. So a robust job's leaves only validate (structure, finiteness)
// and answer; they fold nothing, and the job allocates no partial sums.
//
// The rules take the updates' deltas from the model they were trained from (clipping, Krum's
// distances, Flag's subspace), so robust rules run with the synchronous algorithms (fedavg,
// fedavgm, fedadam), whose rounds share one base version; the asynchronous ones mix base
// versions and are refused at deploy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/interfaces/fljob_spec.h"

namespace shoal {

namespace aggregator {
class RobustAggregator;
struct UpdatePart;
}  // namespace aggregator

// Deploy-time checks of spec.aggregation.robust against the algorithm and the round sizes the
// spec allows (min_round: the fewest updates a round can commit with): kInvalidArgument naming
// the field, e.g. krum with n <= 2f + 2.
Status CheckRobustSpec(const FlJobSpec& spec, bool synchronous, uint32_t min_round);

// What the rule made of one update of a committed round.
struct RobustVerdict {
  // The rule's weight (RobustReport::weights: median/trimmed mean the share of coordinates it
  // was kept at, krum 1 selected / 0 not, flag cos^2 to the subspace, clip alone its scale).
  double weight = 1;
  double clip_scale = 1;             // 1 unless clipNorm scaled it down
  std::optional<double> krum_score;  // krum only
  // Excluded or down-weighted: krum did not select it; median, trimmed mean and flag kept it
  // at less than half the round's median weight; clipNorm alone scaled it down.
  bool suspect = false;
  bool clipped = false;  // clip_scale < 1
};

struct RobustOutcome {
  // The rule that ran: median, trimmedMean, krum, flag, or clip (clipNorm alone). A round too
  // small for krum (n <= 2f + 2) runs the median instead, and `fallback` says why.
  std::string rule;
  std::string fallback;
  std::vector<RobustVerdict> updates;  // in the order given
  int flag_iterations = 0;
  double ms = 0;
};

class RobustCommitter {
 public:
  RobustCommitter();
  ~RobustCommitter();
  RobustCommitter(const RobustCommitter&) = delete;
  RobustCommitter& operator=(const RobustCommitter&) = delete;

  // The rule of `spec` over `bodies` (SHU1 update bodies in the pool, validated by a leaf),
  // taken as deltas from `reference` (the model they were trained from, mspec's layout), into
  // out (mspec.num_params() floats): a model. Read in place: each update's tensors are parts
  // of one update for the rule, whatever their dtype (zero copy). Errors: an update that no
  // longer parses (named by its index), or the rule's own refusal.
  Result<RobustOutcome> Aggregate(const FlRobustSpec& spec, const model::ModelSpec& mspec,
                                  const float* reference,
                                  std::span<const std::span<const std::byte>> bodies, float* out);

 private:
  std::unique_ptr<aggregator::RobustAggregator> agg_;  // threads made on first use
  std::vector<std::vector<aggregator::UpdatePart>> parts_;
};

}  // namespace shoal
