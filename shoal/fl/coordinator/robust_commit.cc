#include "shoal/fl/coordinator/robust_commit.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "shoal/fl/robust/robust.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal {

namespace agg = aggregator;

Status CheckRobustSpec(const FlJobSpec& s, bool synchronous, uint32_t min_round) {
  const FlRobustSpec& r = s.robust;
  if (!r.enabled()) return {};
  const std::string path = "spec.aggregation.robust";
  static const char* const kRules[] = {"none", "median", "trimmedMean", "krum", "flag"};
  if (std::find(std::begin(kRules), std::end(kRules), r.rule) == std::end(kRules)) {
    return InvalidArgument(path + ".rule: unknown rule '" + r.rule +
                           "' (none, median, trimmedMean, krum, flag)");
  }
  if (!synchronous) {
    return InvalidArgument(path +
                           ": robust rules run over a round's updates trained from one "
                           "model version: algorithm " +
                           s.algorithm + " mixes base versions (use fedavg, fedavgm or fedadam)");
  }
  if (!(r.clip_norm >= 0) || !(r.clip_norm < 1e300)) {
    return InvalidArgument(path + ".clipNorm: must be a finite number > 0");
  }
  if (r.rule == "trimmedMean" && !(r.beta >= 0 && r.beta < 0.5)) {
    return InvalidArgument(path + ".beta: must be >= 0 and < 0.5");
  }
  const std::string round_size =
      s.round_deadline_s > 0 ? "a round can commit with " + std::to_string(min_round) +
                                   " update(s) (spec.clients.quorum at spec.deadlines.round)"
                             : "a round commits with " + std::to_string(min_round) +
                                   " update(s) (spec.clients.quorum, else spec.clients.expected)";
  if (r.rule == "krum") {
    if (uint64_t{min_round} <= 2 * uint64_t{r.f} + 2) {
      return InvalidArgument(path +
                             ".f: krum tolerates f byzantine updates among n only when n > "
                             "2f + 2 = " +
                             std::to_string(2 * uint64_t{r.f} + 2) + ", and " + round_size);
    }
    if (r.m > min_round - r.f) {
      return InvalidArgument(path + ".m: krum averages at most n - f = " +
                             std::to_string(min_round - r.f) + " updates, and " + round_size);
    }
  }
  if (r.rule == "flag" && (r.rank < 1 || r.rank > min_round)) {
    return InvalidArgument(path + ".rank: must be between 1 and the round's updates, and " +
                           round_size);
  }
  return {};
}

RobustCommitter::RobustCommitter() = default;
RobustCommitter::~RobustCommitter() = default;

namespace {

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Result<RobustOutcome> RobustCommitter::Aggregate(const FlRobustSpec& spec,
                                                 const model::ModelSpec& mspec,
                                                 const float* reference,
                                                 std::span<const std::span<const std::byte>> bodies,
                                                 float* out) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = bodies.size();
  if (n == 0) return InvalidArgument("robust commit: no updates");
  if (!agg_) agg_ = std::make_unique<agg::RobustAggregator>();
  // The leaf checked the values; the structure is parsed again for the tensors' places.
  model::ParseLimits limits;
  limits.check_finite = false;
  parts_.resize(n);
  std::vector<agg::UpdateRef> refs;
  refs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto view = model::ParseUpdate(bodies[i], mspec, limits);
    if (!view.ok()) {
      return InvalidArgument("robust commit: update " + std::to_string(i) + ": " +
                             view.status().message());
    }
    std::vector<agg::UpdatePart>& parts = parts_[i];
    parts.clear();
    for (const model::TensorView& t : view->tensors) {
      parts.push_back({t.data, static_cast<agg::DType>(t.dtype), t.numel});
    }
    refs.emplace_back(std::span<const agg::UpdatePart>(parts), mspec.num_params());
  }
  agg::RobustInput in;
  in.updates = refs;
  in.reference = reference;
  in.clip_norm = static_cast<float>(spec.clip_norm);
  in.clip_to_median_norm = spec.clip_median;

  RobustOutcome outcome;
  outcome.rule = spec.rule == "none" ? "clip" : spec.rule;
  std::string rule = outcome.rule;
  if (rule == "krum" && n <= 2 * size_t{spec.f} + 2) {
    outcome.fallback = "krum needs n > 2f + 2 = " + std::to_string(2 * size_t{spec.f} + 2) +
                       " updates, the round has " + std::to_string(n) + ": median instead";
    rule = "median";
  }
  Result<agg::RobustReport> report = InvalidArgument("robust commit: unknown rule " + rule);
  if (rule == "median") {
    report = agg_->Median(in, out);
  } else if (rule == "trimmedMean") {
    report = agg_->TrimmedMean(in, spec.beta, out);
  } else if (rule == "krum") {
    const size_t m = std::min<size_t>(spec.m, n - spec.f);  // 0: n - f
    report = agg_->MultiKrum(in, spec.f, m, out);
  } else if (rule == "flag") {
    agg::FlagOptions o;
    o.rank = std::min<size_t>(spec.rank, n);
    report = agg_->Flag(in, o, out);
  } else if (rule == "clip") {
    report = agg_->ClippedMean(in, out);
  }
  if (!report.ok()) return report.status();
  outcome.rule = rule;
  outcome.flag_iterations = report->flag_iterations;
  const double median_weight = MedianOf(report->weights);
  outcome.updates.resize(n);
  for (size_t i = 0; i < n; ++i) {
    RobustVerdict& v = outcome.updates[i];
    v.weight = report->weights[i];
    v.clip_scale = i < report->clip_scale.size() ? report->clip_scale[i] : 1.0;
    v.clipped = v.clip_scale < 1;
    if (rule == "krum") {
      v.krum_score = report->krum_scores[i];
      v.suspect = v.weight == 0;
    } else if (rule == "clip") {
      v.suspect = v.clipped;
    } else {
      v.suspect = v.weight < 0.5 * median_weight;
    }
  }
  outcome.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return outcome;
}

}  // namespace shoal
