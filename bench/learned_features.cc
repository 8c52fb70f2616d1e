// bench-learned-features: does a richer state help the learned policy? The shipped table's state
// is the idle-time history alone (count, median, spread; learned_policy.h). This measures one
// more feature, issue 16's "arrival rates at several horizons": the arrival rate over the last
// minute against the last ten minutes when the idle period begins, in three buckets (< 2x,
// 2-5x, >= 5x: steady, rising, a burst holding most of the ten minutes' calls). Both tables
// are trained on the same idle periods as `shoal sim train` (five families, seeds 1000..1015)
// and scored exactly on the same evaluation periods (every action's cost on a finished idle
// period is arithmetic, so the comparison is counterfactual, not two noisy runs). Anchor: the
// state-only table, same run. A sparse (state, bucket) row falls back to the state's row.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "shoal/autoscaler/learned_training.h"

using namespace shoal;

namespace {

constexpr size_t kKeep60 = 3;  // the action EvaluateIdleCost and the policy fall back to

size_t RateBucket(const IdlePeriod& p) {
  const double ratio = p.rate_10m > 0 ? p.rate_1m / p.rate_10m : 10;
  return ratio < 2 ? 0 : ratio < 5 ? 1 : 2;
}

// The (state, rate bucket) table, trained like LearnedModel::Learn on the same periods.
class RateAugmentedTable {
 public:
  explicit RateAugmentedTable(const LearnedModel& base) : base_(base) {}
  void Learn(const IdlePeriod& p) {
    auto& row = rows_[Key(p)];
    row.resize(base_.num_actions());
    for (size_t a = 0; a < base_.num_actions(); ++a) {
      const ActionCost c = base_.Score(a, p);
      if (!c.valid) continue;
      ++row[a].n;
      row[a].cold += c.cold_requests;
      row[a].inst += c.instance_s;
    }
  }
  size_t Choose(const IdlePeriod& p, const LearnedWeights& w) const {
    if (auto it = rows_.find(Key(p)); it != rows_.end()) {
      size_t best = SIZE_MAX;
      double best_cost = INFINITY;
      for (size_t a = 0; a < it->second.size(); ++a) {
        const Cell& c = it->second[a];
        if (c.n < base_.min_samples) continue;
        const double n = static_cast<double>(c.n);
        const double cost = w.cost_weight * c.inst / n + w.cold_weight * c.cold / n;
        if (cost < best_cost - 1e-12) best_cost = cost, best = a;
      }
      if (best != SIZE_MAX) return best;
    }
    return base_.Choose(p.state, w, kKeep60);
  }
  size_t rows() const { return rows_.size(); }

 private:
  struct Cell {
    uint64_t n = 0;
    double cold = 0, inst = 0;
  };
  static size_t Key(const IdlePeriod& p) { return p.state * 3 + RateBucket(p); }
  const LearnedModel& base_;
  std::map<size_t, std::vector<Cell>> rows_;
};

// Mean weighted idle cost per period of `choose`, over that of a 60 s keep-alive.
template <typename Choose>
double Ratio(const LearnedModel& m, const std::vector<IdlePeriod>& periods, const LearnedWeights& w,
             Choose choose) {
  double learned = 0, keep60 = 0;
  for (const IdlePeriod& p : periods) {
    ActionCost c = m.Score(choose(p), p);
    if (!c.valid) c = m.Score(kKeep60, p);
    const ActionCost b = m.Score(kKeep60, p);
    learned += w.cost_weight * c.instance_s + w.cold_weight * c.cold_requests;
    keep60 += w.cost_weight * b.instance_s + w.cold_weight * b.cold_requests;
  }
  return keep60 > 0 ? learned / keep60 : 1;
}

double GeoMean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return v.empty() ? 1 : std::exp(s / static_cast<double>(v.size()));
}

}  // namespace

int main() {
  TrainOptions t;  // the shipped table's training set
  auto trained = TrainLearnedPolicy(t);
  if (!trained.ok()) {
    std::fprintf(stderr, "bench-learned-features: %s\n", trained.status().message().c_str());
    return 1;
  }
  const LearnedModel& m = trained->model;
  RateAugmentedTable aug(m);
  for (const IdlePeriod& p : trained->periods) aug.Learn(p);
  const LearnedWeights w;
  auto state_only = [&](const IdlePeriod& p) { return m.Choose(p.state, w, kKeep60); };
  auto with_rate = [&](const IdlePeriod& p) { return aug.Choose(p, w); };

  size_t buckets[3] = {0, 0, 0};
  for (const IdlePeriod& p : trained->periods) ++buckets[RateBucket(p)];
  std::printf(
      "bench-learned-features: idle cost per period / a 60 s keep-alive's (lower is "
      "better; default weights), state = idle history (v1, anchor) vs idle history x "
      "rate(1 min)/rate(10 min) bucket (<2, 2-5, >=5)\n");
  std::printf("training: %zu periods (buckets %zu / %zu / %zu), %zu (state, bucket) rows\n",
              trained->periods.size(), buckets[0], buckets[1], buckets[2], aug.rows());
  const double train_v1 = Ratio(m, trained->periods, w, state_only);
  const double train_rate = Ratio(m, trained->periods, w, with_rate);
  std::printf("%-18s %-6s %8s %9s %9s %7s\n", "set", "seed", "periods", "v1", "+rate", "ratio");
  std::printf("%-18s %-6s %8zu %9.3f %9.3f %7.3f\n", "training runs", "1000+",
              trained->periods.size(), train_v1, train_rate, train_rate / train_v1);

  const auto model = std::make_shared<const LearnedModel>(m);
  std::vector<double> eval_v1, eval_rate, held_v1, held_rate;  // per seed, geometric means
  for (uint64_t seed = 42; seed <= 44; ++seed) {
    std::vector<double> ev1, erate, hv1, hrate;
    for (const char* family : kWorkloadFamilies) {
      const bool held_out = std::find_if(std::begin(kTrainingFamilies), std::end(kTrainingFamilies),
                                         [&](const char* f) { return std::string(f) == family; }) ==
                            std::end(kTrainingFamilies);
      ScenarioOptions o;
      o.workload = std::string("gen-") + family;
      o.seed = seed;
      auto periods = CollectIdlePeriods(o, model);
      if (!periods.ok()) {
        std::fprintf(stderr, "bench-learned-features: %s\n", periods.status().message().c_str());
        return 1;
      }
      if (periods->empty()) continue;
      const double v1 = Ratio(m, *periods, w, state_only);
      const double rate = Ratio(m, *periods, w, with_rate);
      (held_out ? hv1 : ev1).push_back(v1);
      (held_out ? hrate : erate).push_back(rate);
      std::printf("%-18s %-6llu %8zu %9.3f %9.3f %7.3f%s\n", o.workload.c_str(),
                  static_cast<unsigned long long>(seed), periods->size(), v1, rate, rate / v1,
                  held_out ? "  (held out)" : "");
    }
    eval_v1.push_back(GeoMean(ev1));
    eval_rate.push_back(GeoMean(erate));
    held_v1.push_back(GeoMean(hv1));
    held_rate.push_back(GeoMean(hrate));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double e1 = median(eval_v1), er = median(eval_rate);
  const double h1 = median(held_v1), hr = median(held_rate);
  std::printf("\nmedian over seeds 42..44 of the geometric mean over families:\n");
  std::printf("  training families, eval seeds: v1 %.3f, +rate %.3f (%.3fx)\n", e1, er, er / e1);
  std::printf("  held-out families (fl, zipf):  v1 %.3f, +rate %.3f (%.3fx)\n", h1, hr, hr / h1);
  std::printf(
      "  generalisation gap (eval - training): v1 %+.3f, +rate %+.3f; held-out - training: "
      "v1 %+.3f, +rate %+.3f\n",
      e1 - train_v1, er - train_rate, h1 - train_v1, hr - train_rate);
  std::printf("RESULT learned_rate_feature_eval ratio=%.3f\n", er / e1);
  return 0;
}
