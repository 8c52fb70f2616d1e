#include "shoal/tools/scenarios/learned_training.h"

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
        t.progress(out.runs, total,
                   family + " seed " + std::to_string(o.seed) + ": " +
                       std::to_string(periods->size()) + " idle periods");
      }
    }
  }
  out.model.trained_on = trained_on + " (seeds " + std::to_string(t.seed) + ".." +
                         std::to_string(t.seed + t.seeds - 1) + ", duration x" +
                         std::to_string(t.duration_scale).substr(0, 4) + ")";
  out.model.seed = t.seed;
  if (t.sizing_seeds > 0) {
    SHOAL_RETURN_IF_ERROR(TrainSizing(t, &out.model, &out.sizing_runs));
    out.model.trained_on += "; sizing: seeds " + std::to_string(t.seed) + ".." +
                            std::to_string(t.seed + std::min(t.seeds, t.sizing_seeds) - 1) + " x " +
                            std::to_string(out.model.sizing().actions().size()) + " actions";
  }
  return out;
}

Status TrainSizing(const TrainOptions& t, LearnedModel* model, size_t* runs) {
  const auto idle = std::make_shared<const LearnedModel>(*model);
  SizingTable& table = model->mutable_sizing();
  const size_t actions = table.actions().size();
  const int seeds = std::min(t.seeds, t.sizing_seeds);
  const size_t total = t.families.size() * static_cast<size_t>(seeds) * actions;
  size_t done = 0;
  for (const auto& family : t.families) {
    for (int k = 0; k < seeds; ++k) {
      // The same run once per action: per function, its whole-run outcome under each.
      std::vector<std::vector<SizingCost>> cost;  // [action][function]
      std::vector<size_t> dominant;               // per function, from the default action's run
      std::vector<uint64_t> intervals;
      for (size_t a = 0; a < actions; ++a) {
        ScenarioOptions o;
        o.workload = "gen-" + family;
        o.seed = t.seed + static_cast<uint64_t>(k);
        o.duration_scale = t.duration_scale;
        o.policy = "learned";
        o.learned_model = idle;
        o.sizing_action = static_cast<int>(a);
        std::vector<std::vector<SizingSample>> samples;
        if (a == SizingTable::kDefaultAction) o.sizing_samples = &samples;
        auto r = RunScenario(o);
        if (!r.ok()) return r.status();
        cost.emplace_back();
        for (const FunctionReport& f : r->report.functions) {
          cost.back().push_back({f.instance_s, static_cast<double>(f.cold_requests),
                                 static_cast<double>(f.slo_violations)});
        }
        if (a == SizingTable::kDefaultAction) {
          for (const auto& fs : samples) {
            std::vector<uint64_t> count(table.num_states(), 0);
            for (const SizingSample& x : fs) ++count[x.state];
            dominant.push_back(
                static_cast<size_t>(std::max_element(count.begin(), count.end()) - count.begin()));
            intervals.push_back(std::max<uint64_t>(1, fs.size()));
          }
        }
        ++done;
        if (t.progress) {
          t.progress(done, total,
                     "sizing " + family + " seed " + std::to_string(o.seed) + " " +
                         table.actions()[a].name);
        }
      }
      for (size_t a = 0; a < actions; ++a) {
        for (size_t f = 0; f < dominant.size() && f < cost[a].size(); ++f) {
          table.Learn({dominant[f], a, cost[a][f], intervals[f]});
        }
      }
    }
  }
  if (runs) *runs = done;
  return {};
}

Result<RunCost> LearnedRunCost(ScenarioOptions o, std::shared_ptr<const LearnedModel> model,
                               int sizing_action, const LearnedWeights& w) {
  o.policy = "learned";
  o.learned_model = std::move(model);
  o.sizing_action = sizing_action;
  auto r = RunScenario(o);
  if (!r.ok()) return r.status();
  const FunctionReport& t = r->report.total;
  RunCost c;
  c.cost = {t.instance_s, static_cast<double>(t.cold_requests),
            static_cast<double>(t.slo_violations)};
  c.weighted = c.cost.Weighted(w);
  return c;
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

// The sizing table's generalisation: whole-run weighted cost with the table's sizing over the
// same run with shoal's sizing (the default action), on training runs, on the training families
// at the evaluation seed, on held-out families and on the bench workloads.
bool PrintSizingGeneralisation(const TrainOptions& t, std::shared_ptr<const LearnedModel> model,
                               uint64_t eval_seed, const LearnedWeights& w) {
  struct Row {
    std::string set, kind;
    double table = 0, shoal = 0;
    SizingCost tc, sc;
    int runs = 0;
  };
  std::vector<Row> rows;
  auto add = [&](const std::string& set, const std::string& kind, const std::string& workload,
                 uint64_t seed) -> bool {
    ScenarioOptions o;
    o.workload = workload;
    o.seed = seed;
    o.duration_scale = t.duration_scale;
    auto a = LearnedRunCost(o, model, -1, w);
    auto b = LearnedRunCost(o, model, static_cast<int>(SizingTable::kDefaultAction), w);
    if (!a.ok() || !b.ok()) {
      std::fprintf(stderr, "shoal sim train: %s\n",
                   (a.ok() ? b.status() : a.status()).message().c_str());
      return false;
    }
    if (rows.empty() || rows.back().set != set) {
      rows.emplace_back();
      rows.back().set = set;
      rows.back().kind = kind;
    }
    Row& r = rows.back();
    r.table += a->weighted;
    r.shoal += b->weighted;
    r.tc.instance_s += a->cost.instance_s;
    r.tc.cold_requests += a->cost.cold_requests;
    r.tc.slo_misses += a->cost.slo_misses;
    r.sc.instance_s += b->cost.instance_s;
    r.sc.cold_requests += b->cost.cold_requests;
    r.sc.slo_misses += b->cost.slo_misses;
    ++r.runs;
    return true;
  };
  const int seeds = std::min(t.seeds, t.sizing_seeds);
  size_t step = 0;
  const size_t steps = t.families.size() * (static_cast<size_t>(seeds) + 1) +
                       (std::size(kWorkloadFamilies) - t.families.size()) +
                       std::size(kScenarioWorkloads);
  for (const auto& f : t.families) {
    for (int k = 0; k < seeds; ++k) {
      if (!add("train " + f, "train", "gen-" + f, t.seed + static_cast<uint64_t>(k))) return false;
      ProgressBar(++step, steps, "sizing evaluate gen-" + f);
    }
  }
  // Three evaluation seeds per unseen set: one run is too noisy for a gap of a few tenths of %.
  for (const auto& f : t.families) {
    for (uint64_t e = eval_seed; e < eval_seed + 3; ++e) {
      if (!add("gen-" + f, "family, eval seeds", "gen-" + f, e)) return false;
    }
    ProgressBar(++step, steps, "sizing evaluate gen-" + f);
  }
  for (const char* f : kWorkloadFamilies) {
    if (std::find(t.families.begin(), t.families.end(), f) != t.families.end()) continue;
    for (uint64_t e = eval_seed; e < eval_seed + 3; ++e) {
      if (!add("gen-" + std::string(f), "held-out family", "gen-" + std::string(f), e))
        return false;
    }
    ProgressBar(++step, steps, "sizing evaluate gen-" + std::string(f));
  }
  for (const char* wl : kScenarioWorkloads) {
    for (uint64_t e = eval_seed; e < eval_seed + 3; ++e) {
      if (!add(wl, "bench workload", wl, e)) return false;
    }
    ProgressBar(++step, steps, std::string("sizing evaluate ") + wl);
  }
  std::printf(
      "\nbusy-time sizing: weighted cost of whole runs (costWeight x inst-s + coldWeight x "
      "cold requests + missWeight %.1f x slo misses), the table's sizing vs shoal's "
      "(x1.00, hold 10 s) on the same arrivals; eval seeds %llu..+2\n",
      w.miss_weight, static_cast<unsigned long long>(eval_seed));
  std::printf("%-16s %-18s %5s %12s %12s %8s %8s %8s %7s\n", "set", "kind", "runs", "inst-s",
              "shoal inst-s", "cold", "shoal", "misses", "ratio");
  double log_train = 0, log_eval = 0, log_held = 0;
  int n_train = 0, n_eval = 0, n_held = 0;
  for (const Row& r : rows) {
    const double ratio = r.shoal > 0 ? r.table / r.shoal : 1;
    std::printf("%-16s %-18s %5d %12.0f %12.0f %8.0f %8.0f %8.0f %7.3f\n", r.set.c_str(),
                r.kind.c_str(), r.runs, r.tc.instance_s, r.sc.instance_s, r.tc.cold_requests,
                r.sc.cold_requests, r.tc.slo_misses, ratio);
    if (r.kind == "train") log_train += std::log(ratio), ++n_train;
    if (r.kind == "family, eval seeds") log_eval += std::log(ratio), ++n_eval;
    if (r.kind == "held-out family") log_held += std::log(ratio), ++n_held;
  }
  const double tr = n_train ? std::exp(log_train / n_train) : 1;
  const double ev = n_eval ? std::exp(log_eval / n_eval) : 1;
  const double ho = n_held ? std::exp(log_held / n_held) : 1;
  std::printf(
      "sizing generalisation gap (geometric means of the ratios): training %.3f, training "
      "families at eval seeds %.3f (%+.3f), held-out families %.3f (%+.3f)\n",
      tr, ev, ev - tr, ho, ho - tr);
  return true;
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
  std::printf(
      "\nidle cost per idle period (costWeight %.4f/inst-s, coldWeight %.1f/cold request), "
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
  std::printf(
      "generalisation gap (ratio on unseen runs - ratio on training runs): "
      "training families at eval seeds %+.3f (%.3f vs %.3f), held-out families %+.3f "
      "(%.3f)\n",
      eval_ratio - train_ratio, eval_ratio, train_ratio, held_ratio - train_ratio, held_ratio);
  if (trained->model.sizing().samples() > 0 &&
      !PrintSizingGeneralisation(t, model, c.eval_seed, w)) {
    return 1;
  }
  std::printf("total %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace shoal
