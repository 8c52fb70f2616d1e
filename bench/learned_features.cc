// bench-learned-features: does a richer state help the learned policy? The shipped idle table's
// state is the idle-time history alone (count, median, spread; learned_policy.h). This measures,
// one at a time, the features issue 16 names, each crossed with that state in three buckets:
//   rate      the arrival rate over the last minute / the last ten minutes (< 2, 2-5, >= 5)
//   wait      the mean queue wait of the active period that just ended (< 1 ms, < 100 ms, more)
//   cold      the function's cold-start cost (< 0.5 s, 0.5-1.5 s, more)
//   recency   the time since the call before that active period, over the history's median
//             (< 0.5, 0.5-2, >= 2: the last gap short, typical or long)
//   conc      the function's per-instance concurrency (1, 2-4, >= 5)
// Every table is trained on the same idle periods as `shoal sim train` (five families, seeds
// 1000..1015) and scored exactly on the same evaluation periods (every action's cost on a
// finished idle period is arithmetic, so the comparison is counterfactual, not two noisy runs).
// Anchor: the state-only table, same run. A sparse (state, bucket) row falls back to the
// state's row. A feature is worth adopting only if it lowers the cost on unseen runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "shoal/tools/scenarios/learned_training.h"

using namespace shoal;

namespace {

constexpr size_t kKeep60 = 3;  // the action EvaluateIdleCost and the policy fall back to

using Bucket = size_t (*)(const IdlePeriod&);

size_t RateBucket(const IdlePeriod& p) {
  const double ratio = p.rate_10m > 0 ? p.rate_1m / p.rate_10m : 10;
  return ratio < 2 ? 0 : ratio < 5 ? 1 : 2;
}
size_t WaitBucket(const IdlePeriod& p) {
  return p.queue_wait_s < 0.001 ? 0 : p.queue_wait_s < 0.1 ? 1 : 2;
}
size_t ColdBucket(const IdlePeriod& p) {
  return p.cold_start_s < 0.5 ? 0 : p.cold_start_s < 1.5 ? 1 : 2;
}
size_t RecencyBucket(const IdlePeriod& p) {
  const double median = p.quantiles.size() > 2 ? p.quantiles[2] : 0;
  if (p.history == 0 || !(median > 0)) return 1;
  const double r = p.previous_idle_s / median;
  return r < 0.5 ? 0 : r < 2 ? 1 : 2;
}
size_t ConcurrencyBucket(const IdlePeriod& p) {
  return p.concurrency <= 1 ? 0 : p.concurrency < 5 ? 1 : 2;
}

struct Feature {
  const char* name;
  Bucket bucket;
};
constexpr Feature kFeatures[] = {{"rate", RateBucket},
                                 {"wait", WaitBucket},
                                 {"cold", ColdBucket},
                                 {"recency", RecencyBucket},
                                 {"conc", ConcurrencyBucket}};

// The (state, feature bucket) table, trained like LearnedModel::Learn on the same periods.
class AugmentedTable {
 public:
  AugmentedTable(const LearnedModel& base, Bucket bucket) : base_(base), bucket_(bucket) {}
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
  size_t Key(const IdlePeriod& p) const { return p.state * 3 + bucket_(p); }
  const LearnedModel& base_;
  Bucket bucket_;
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

// The busy-time sizing table's context with and without the function's concurrency (1, 2-4,
// >= 5; the shipped table has none, on this measurement): both
// trained the same way (`shoal sim train`'s sizing seeds), each scored as whole-run weighted
// cost with its choices over the same run with shoal's sizing, on training runs, the training
// families at seeds 42..44 and the held-out families at 42..44.
bool SizingConcurrency(const LearnedModel& idle) {
  TrainOptions t;
  LearnedModel with = idle, without = idle;  // without: the shipped context
  with.mutable_sizing() = SizingTable(std::vector<uint32_t>{2, 5});
  without.mutable_sizing() = SizingTable();
  size_t runs = 0;
  if (!TrainSizing(t, &with, &runs).ok() || !TrainSizing(t, &without, &runs).ok()) {
    std::fprintf(stderr, "bench-learned-features: sizing training failed\n");
    return false;
  }
  const auto a = std::make_shared<const LearnedModel>(with);
  const auto b = std::make_shared<const LearnedModel>(without);
  const LearnedWeights w;
  struct Sums {
    double with = 0, without = 0, shoal = 0;
  };
  std::map<std::string, Sums> sets;  // "train", "eval", "held-out"
  auto score = [&](const std::string& set, const std::string& workload, uint64_t seed) -> bool {
    ScenarioOptions o;
    o.workload = workload;
    o.seed = seed;
    auto x = LearnedRunCost(o, a, -1, w);
    auto y = LearnedRunCost(o, b, -1, w);
    auto z = LearnedRunCost(o, a, static_cast<int>(SizingTable::kDefaultAction), w);
    if (!x.ok() || !y.ok() || !z.ok()) return false;
    Sums& s = sets[set];
    s.with += x->weighted;
    s.without += y->weighted;
    s.shoal += z->weighted;
    return true;
  };
  for (const auto& f : t.families) {
    for (int k = 0; k < std::min(t.seeds, t.sizing_seeds); ++k) {
      if (!score("train", "gen-" + f, t.seed + static_cast<uint64_t>(k))) return false;
    }
  }
  for (uint64_t seed = 42; seed <= 44; ++seed) {
    for (const char* f : kWorkloadFamilies) {
      const bool held_out = std::find(t.families.begin(), t.families.end(), f) == t.families.end();
      if (!score(held_out ? "held-out" : "eval", std::string("gen-") + f, seed)) return false;
    }
  }
  std::printf(
      "\nbusy-time sizing context with and without the function's concurrency (3 buckets "
      "vs 1): whole-run weighted cost with the table's sizing / with shoal's sizing, "
      "summed over the runs of each set (lower is better)\n");
  std::printf("%-10s %10s %10s %8s\n", "set", "+conc", "no conc", "ratio");
  double eval_ratio = 1, train_with = 1, eval_with = 1, train_without = 1, eval_without = 1;
  for (const char* set : {"train", "eval", "held-out"}) {
    const Sums& s = sets[set];
    const double rw = s.with / s.shoal, ro = s.without / s.shoal;
    std::printf("%-10s %10.4f %10.4f %8.4f\n", set, rw, ro, rw / ro);
    if (std::string(set) == "train") train_with = rw, train_without = ro;
    if (std::string(set) == "eval") eval_ratio = rw / ro, eval_with = rw, eval_without = ro;
  }
  std::printf(
      "generalisation gap (eval - training): with concurrency %+.4f, without (shipped) "
      "%+.4f\n",
      eval_with - train_with, eval_without - train_without);
  std::printf("RESULT learned_sizing_concurrency_eval ratio=%.4f\n", eval_ratio);
  return true;
}

}  // namespace

int main() {
  TrainOptions t;      // the shipped table's training set
  t.sizing_seeds = 0;  // the idle table only
  auto trained = TrainLearnedPolicy(t);
  if (!trained.ok()) {
    std::fprintf(stderr, "bench-learned-features: %s\n", trained.status().message().c_str());
    return 1;
  }
  const LearnedModel& m = trained->model;
  const size_t nf = std::size(kFeatures);
  std::vector<AugmentedTable> aug;
  for (const Feature& f : kFeatures) aug.emplace_back(m, f.bucket);
  for (AugmentedTable& a : aug) {
    for (const IdlePeriod& p : trained->periods) a.Learn(p);
  }
  const LearnedWeights w;
  auto state_only = [&](const IdlePeriod& p) { return m.Choose(p.state, w, kKeep60); };

  std::printf(
      "bench-learned-features: idle cost per period / a 60 s keep-alive's (lower is better; "
      "default weights); v1 = the idle-history state (anchor), +F = that state x feature F's "
      "3 buckets\n");
  std::printf(
      "training: %zu periods; buckets (periods per bucket 0/1/2) and (state, bucket) "
      "rows:\n",
      trained->periods.size());
  for (size_t f = 0; f < nf; ++f) {
    size_t b[3] = {0, 0, 0};
    for (const IdlePeriod& p : trained->periods) ++b[kFeatures[f].bucket(p)];
    std::printf("  %-8s %7zu / %7zu / %7zu, %4zu rows\n", kFeatures[f].name, b[0], b[1], b[2],
                aug[f].rows());
  }
  std::printf("\n%-14s %-5s %8s %8s", "set", "seed", "periods", "v1");
  for (const Feature& f : kFeatures) {
    char head[16];
    std::snprintf(head, sizeof head, "+%s", f.name);
    std::printf(" %9s", head);
  }
  std::printf("\n");
  const double train_v1 = Ratio(m, trained->periods, w, state_only);
  std::vector<double> train_f(nf);
  std::printf("%-14s %-5s %8zu %8.3f", "training runs", "1000+", trained->periods.size(), train_v1);
  for (size_t f = 0; f < nf; ++f) {
    train_f[f] =
        Ratio(m, trained->periods, w, [&](const IdlePeriod& p) { return aug[f].Choose(p, w); });
    std::printf(" %9.3f", train_f[f]);
  }
  std::printf("\n");

  const auto model = std::make_shared<const LearnedModel>(m);
  // Per seed, geometric means over families: [0] = v1, [1 + f] = +feature f.
  std::vector<std::vector<double>> eval(nf + 1), held(nf + 1);
  for (uint64_t seed = 42; seed <= 44; ++seed) {
    std::vector<std::vector<double>> ev(nf + 1), ho(nf + 1);
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
      auto& dst = held_out ? ho : ev;
      const double v1 = Ratio(m, *periods, w, state_only);
      dst[0].push_back(v1);
      std::printf("%-14s %-5llu %8zu %8.3f", o.workload.c_str(),
                  static_cast<unsigned long long>(seed), periods->size(), v1);
      for (size_t f = 0; f < nf; ++f) {
        const double r =
            Ratio(m, *periods, w, [&](const IdlePeriod& p) { return aug[f].Choose(p, w); });
        dst[1 + f].push_back(r);
        std::printf(" %9.3f", r);
      }
      std::printf("%s\n", held_out ? "  (held out)" : "");
    }
    for (size_t k = 0; k <= nf; ++k) {
      eval[k].push_back(GeoMean(ev[k]));
      held[k].push_back(GeoMean(ho[k]));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double e1 = median(eval[0]), h1 = median(held[0]);
  std::printf(
      "\nmedian over seeds 42..44 of the geometric mean over families; ratio = +F / v1 "
      "(below 1: the feature helps); gap = unseen - training\n");
  std::printf("%-8s %10s %10s %10s %10s %10s %10s %s\n", "state", "training", "eval seeds", "ratio",
              "held-out", "ratio", "gap eval", "verdict");
  std::printf("%-8s %10.3f %10.3f %10s %10.3f %10s %+10.3f %s\n", "v1", train_v1, e1, "-", h1, "-",
              e1 - train_v1, "(anchor)");
  double best = 1;
  for (size_t f = 0; f < nf; ++f) {
    const double e = median(eval[1 + f]), h = median(held[1 + f]);
    const bool helps = e / e1 < 0.99 && h / h1 <= 1.0;
    best = std::min(best, e / e1);
    std::printf("+%-7s %10.3f %10.3f %10.3f %10.3f %10.3f %+10.3f %s\n", kFeatures[f].name,
                train_f[f], e, e / e1, h, h / h1, e - train_f[f],
                helps ? "helps: adopt" : "no gain on unseen runs: not adopted");
    std::printf("RESULT learned_feature_%s_eval ratio=%.3f\n", kFeatures[f].name, e / e1);
  }
  std::printf("RESULT learned_features_best_eval ratio=%.3f\n", best);
  return SizingConcurrency(trained->model) ? 0 : 1;
}
