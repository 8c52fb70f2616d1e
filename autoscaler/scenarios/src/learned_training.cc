#include "shoal/autoscaler/learned_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

namespace shoal {

Result<std::vector<IdlePeriod>> CollectIdlePeriods(ScenarioOptions o,
                                                   std::shared_ptr<const LearnedModel> model) {
  std::vector<IdlePeriod> periods;
  o.policy = "learned";
  o.learned_model = std::move(model);
  o.idle_periods = &periods;
  auto r = RunScenario(o);
  if (!r.ok()) return r.status();
  return periods;
}

Result<TrainResult> TrainLearnedPolicy(const TrainOptions& t) {
  if (t.seeds < 1) return InvalidArgument("seeds must be >= 1");
  if (t.families.empty()) return InvalidArgument("no training family given");
  TrainResult out;
  const auto behaviour = std::make_shared<const LearnedModel>();
  const size_t total = t.families.size() * static_cast<size_t>(t.seeds);
  std::string trained_on;
  for (const auto& family : t.families) {
    trained_on += (trained_on.empty() ? "" : ", ") + family;
    for (int k = 0; k < t.seeds; ++k) {
      ScenarioOptions o;
      o.workload = "gen-" + family;
      o.seed = t.seed + static_cast<uint64_t>(k);
      o.duration_scale = t.duration_scale;
      auto periods = CollectIdlePeriods(o, behaviour);
      if (!periods.ok()) return periods.status();
      for (const IdlePeriod& p : *periods) out.model.Learn(p);
      out.periods.insert(out.periods.end(), periods->begin(), periods->end());
      ++out.runs;
      if (t.progress) {
        t.progress(out.runs, total, family + " seed " + std::to_string(o.seed) + ": " +
                                        std::to_string(periods->size()) + " idle periods");
      }
    }
  }
  out.model.trained_on = trained_on + " (seeds " + std::to_string(t.seed) + ".." +
                         std::to_string(t.seed + t.seeds - 1) + ", duration x" +
                         std::to_string(t.duration_scale).substr(0, 4) + ")";
  out.model.seed = t.seed;
  return out;
}

IdleCost EvaluateIdleCost(const LearnedModel& m, const std::vector<IdlePeriod>& periods,
                          const LearnedWeights& w) {
  IdleCost c;
  const size_t keep60 = 3;
  for (const IdlePeriod& p : periods) {
    size_t a = m.Choose(p.state, w, keep60);
    ActionCost ac = m.Score(a, p);
    if (!ac.valid) ac = m.Score(keep60, p);  // as the policy does with too little history
    const ActionCost base = m.Score(keep60, p);
    c.learned += w.cost_weight * ac.instance_s + w.cold_weight * ac.cold_requests;
    c.keep60 += w.cost_weight * base.instance_s + w.cold_weight * base.cold_requests;
    ++c.periods;
  }
  if (c.periods > 0) {
    c.learned /= static_cast<double>(c.periods);
    c.keep60 /= static_cast<double>(c.periods);
  }
  return c;
}

}  // namespace shoal

namespace shoal {
namespace {

void ProgressBar(size_t done, size_t total, const std::string& what) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-50.50s", filled, "##############################",
               width - filled, "", done, total, what.c_str());
  if (done == total) std::fprintf(stderr, "\n");
}

}  // namespace

int RunTrainCommand(const TrainCommand& c) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainOptions t = c.train;
  t.progress = [](size_t d, size_t n, const std::string& w) { ProgressBar(d, n, "train " + w); };
  auto trained = TrainLearnedPolicy(t);
  if (!trained.ok()) {
    std::fprintf(stderr, "shoal sim train: %s\n", trained.status().message().c_str());
    return 1;
  }
  const std::string text = trained->model.Serialize();
  {
    std::ofstream out(c.out_path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) {
      std::fprintf(stderr, "shoal sim train: cannot write %s\n", c.out_path.c_str());
      return 1;
    }
  }
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained on %zu runs (%s): %llu idle periods in %.1f s; wrote %s (%zu bytes)\n",
              trained->runs, trained->model.trained_on.c_str(),
              static_cast<unsigned long long>(trained->model.samples()), train_s,
              c.out_path.c_str(), text.size());
  if (!c.evaluate) return 0;

  // The generalisation table: weighted idle cost per idle period, learned / keep-60 (lower is
  // better), with the default weights.
  const LearnedWeights w;
  const auto model = std::make_shared<const LearnedModel>(trained->model);
  struct Set {
    std::string name, kind;
    std::vector<IdlePeriod> periods;
  };
  std::vector<Set> sets;
  sets.push_back({"training runs", "train", trained->periods});
  std::vector<std::pair<std::string, std::string>> evals;  // workload, kind
  for (const auto& f : t.families) evals.push_back({"gen-" + f, "family, eval seed"});
  for (const char* f : kWorkloadFamilies) {
    if (std::find(t.families.begin(), t.families.end(), f) == t.families.end())
      evals.push_back({"gen-" + std::string(f), "held-out family"});
  }
  for (const char* wl : kScenarioWorkloads) evals.push_back({wl, "bench workload"});
  for (size_t i = 0; i < evals.size(); ++i) {
    ScenarioOptions o;
    o.workload = evals[i].first;
    o.seed = c.eval_seed;
    o.duration_scale = t.duration_scale;
    auto periods = CollectIdlePeriods(o, model);
    ProgressBar(i + 1, evals.size(), "evaluate " + o.workload);
    if (!periods.ok()) {
      std::fprintf(stderr, "shoal sim train: %s\n", periods.status().message().c_str());
      return 1;
    }
    sets.push_back({o.workload, evals[i].second, std::move(*periods)});
  }
  std::printf("\nidle cost per idle period (costWeight %.4f/inst-s, coldWeight %.1f/cold request), "
              "learned vs a fixed 60 s keep-alive on the same periods; eval seed %llu\n",
              w.cost_weight, w.cold_weight, static_cast<unsigned long long>(c.eval_seed));
  std::printf("%-16s %-18s %8s %10s %10s %8s\n", "set", "kind", "periods", "learned", "keep-60",
              "ratio");
  double train_ratio = 1, log_eval = 0, log_held = 0;
  int n_eval = 0, n_held = 0;
  for (const Set& s : sets) {
    const IdleCost ic = EvaluateIdleCost(trained->model, s.periods, w);
    std::printf("%-16s %-18s %8zu %10.3f %10.3f %8.3f\n", s.name.c_str(), s.kind.c_str(),
                ic.periods, ic.learned, ic.keep60, ic.ratio());
    if (s.kind == "train") train_ratio = ic.ratio();
    if (ic.periods == 0) continue;
    if (s.kind == "family, eval seed") log_eval += std::log(ic.ratio()), ++n_eval;
    if (s.kind == "held-out family") log_held += std::log(ic.ratio()), ++n_held;
  }
  const double eval_ratio = n_eval ? std::exp(log_eval / n_eval) : 1;
  const double held_ratio = n_held ? std::exp(log_held / n_held) : 1;
  std::printf("generalisation gap (ratio on unseen runs - ratio on training runs): "
              "training families at eval seeds %+.3f (%.3f vs %.3f), held-out families %+.3f "
              "(%.3f)\n",
              eval_ratio - train_ratio, eval_ratio, train_ratio, held_ratio - train_ratio,
              held_ratio);
  std::printf("total %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace shoal
