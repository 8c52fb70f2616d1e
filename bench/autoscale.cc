// bench-autoscale: every scaling policy on the same seeded workloads in the simulator
// (bursty, diurnal, timer-heavy, FL rounds, a 200-function Zipf mix): cold starts, p50/p99,
// SLO violations, instance-seconds, each as a ratio to KPA as Knative runs it with its defaults
// (the anchor, same run, same arrivals; see kpa_policy.h for the Knative code it follows).
// Three ratios are reported, none picked: cold-start requests, instance-seconds and p99. The
// RESULT is their combined score, (cold * inst-s * p99)^(-1/3) of shoal / kpa: above 1 Shoal
// is better, and it falls if any of the three worsens. Median over seeds, with the range.
//
// The learned policy (trained by `shoal sim train` on generator families; these five workloads
// and seeds are never in its training set) is measured against KPA + a 60 s idle keep-alive,
// the baseline of the cold-start literature: cold-start requests after each function's first
// instance, instance-seconds and p99 (targets <= 0.5x, <= 0.8x, <= 1.0x), whether it dominates
// the shoal policy per workload, and the frontier: cold starts vs instance-seconds of each
// policy (learned, shoal, kpa, rl-q) over a sweep of its cost knob beside fixed keep-alives of
// 10 s .. 20 min, every point on every seed (medians, and each point's ratio to its own seed's
// fixed frontier as median [min-max]). Then the busy-time sizing: learned with its sizing table
// against learned with shoal's sizing (the table's default action, all else equal), kpa and
// shoal, per workload on sums over the seeds: whether it beats or matches each on cold starts,
// instance-seconds and p99.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench_args.h"
#include "run_stats.h"
#include "shoal/tools/scenarios/scenarios.h"

using namespace shoal;

using shoal::bench::Median;

namespace {

struct Point {
  double later_cold = 0;  // cold-start requests after each function's first instance
  double requests = 0;
  double instance_s = 0;
  double p99_s = 0;
  void Add(const FunctionReport& t) {
    later_cold += static_cast<double>(t.cold_requests - t.first_cold_requests);
    requests += static_cast<double>(t.requests);
    instance_s += t.instance_s;
    p99_s += t.p99_latency_s;
  }
  double cold_per_1k() const { return requests > 0 ? 1000 * later_cold / requests : 0; }
};

Result<FunctionReport> Run(const std::string& workload, const std::string& policy, uint64_t seed,
                           double scale, double keep_alive_s = -1,
                           std::map<std::string, double> params = {}, int sizing_action = -1) {
  ScenarioOptions o;
  o.sizing_action = sizing_action;
  o.workload = workload;
  o.policy = policy;
  o.seed = seed;
  o.duration_scale = scale;
  o.keep_alive_s = keep_alive_s;
  o.params = std::move(params);
  auto r = RunScenario(o);
  if (!r.ok()) return r.status();
  return r->report.total;
}

// Instance-seconds of the fixed keep-alive frontier at a cold-start rate: piecewise linear
// between its Pareto points (those no other point beats on both cold rate and instance-seconds;
// a mix of two keep-alives reaches any point between them), sorted by cold rate. Below its
// least cold rate, that point's; beyond its greatest, the fewest instance-seconds of all.
double FrontierAt(std::vector<std::pair<double, double>> pts, double cold) {
  std::sort(pts.begin(), pts.end());
  std::vector<std::pair<double, double>> pareto;
  for (const auto& p : pts) {
    if (pareto.empty() || p.second < pareto.back().second) pareto.push_back(p);
  }
  if (cold <= pareto.front().first) return pareto.front().second;
  for (size_t i = 1; i < pareto.size(); ++i) {
    if (cold <= pareto[i].first) {
      const auto [c0, i0] = pareto[i - 1];
      const auto [c1, i1] = pareto[i];
      return i0 + (i1 - i0) * (cold - c0) / (c1 - c0);  // c1 > c0: strictly fewer inst-s
    }
  }
  return pareto.back().second;
}

}  // namespace

int main(int argc, char** argv) {
  double scale = 1.0;
  uint64_t seed = 42;
  int seeds = 3;
  shoal::bench::Args args("bench-autoscale [--duration-scale X] [--seed S] [--seeds N]");
  args.Option("--duration-scale", &scale).Option("--seed", &seed).Option("--seeds", &seeds);
  if (!args.Parse(argc, argv)) return 2;
  if (seeds < 1) {
    std::fprintf(stderr, "bench-autoscale: --seeds must be >= 1\n");
    return 1;
  }
  // The seeds' range as the tables' headings print it.
  const auto first_seed = static_cast<unsigned long long>(seed);
  const auto last_seed = static_cast<unsigned long long>(seed + seeds - 1);
  const size_t total = seeds * std::size(kScenarioWorkloads) * std::size(kScenarioPolicies);
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::printf(
      "bench-autoscale: simulator, seeds %llu..%llu, default cold-start model "
      "(pod allocation + deployment + scheduling, lognormal), control interval 2 s\n",
      first_seed, last_seed);
  std::printf(
      "anchor: kpa as Knative runs it with its defaults (60 s stable / 6 s panic window, "
      "panic at 200%%, target 70%% of the concurrency, up 1000x / down 2x, no idle "
      "keep-alive, scale-to-zero grace 30 s as an upper bound: the last instance goes once "
      "the activator has been in the path 30 s, pod retention 0 s, target burst "
      "capacity 211)\n");
  std::vector<ScenarioComparison> shoal_vs_kpa, rlq_vs_kpa;
  uint64_t later_shoal = 0, later_kpa = 0;
  for (int k = 0; k < seeds; ++k) {
    std::vector<ScenarioResult> results;
    for (const char* workload : kScenarioWorkloads) {
      for (const char* policy : kScenarioPolicies) {
        ScenarioOptions o;
        o.workload = workload;
        o.policy = policy;
        o.seed = seed + k;
        o.duration_scale = scale;
        auto r = RunScenario(o);
        ++done;
        std::fprintf(stderr, "[%zu/%zu] seed %llu: %s / %s\n", done, total,
                     static_cast<unsigned long long>(o.seed), workload, policy);
        if (!r.ok()) {
          std::fprintf(stderr, "bench-autoscale: %s\n", r.status().ToString().c_str());
          return 1;
        }
        results.push_back(std::move(*r));
      }
    }
    if (k == 0) {
      std::printf("\nseed %llu: ratios x* are against kpa on the same workload; lower is better\n",
                  static_cast<unsigned long long>(seed));
      std::printf("%s", FormatScenarioTable(results, "kpa").c_str());
      for (const auto& r : results) {
        const FunctionReport& t = r.report.total;
        if (r.policy == "shoal") later_shoal += t.cold_requests - t.first_cold_requests;
        if (r.policy == "kpa") later_kpa += t.cold_requests - t.first_cold_requests;
      }
      std::printf(
          "cold-start requests after each function's first instance (no online policy "
          "avoids the first): shoal %llu, kpa %llu\n\n",
          static_cast<unsigned long long>(later_shoal), static_cast<unsigned long long>(later_kpa));
    }
    shoal_vs_kpa.push_back(CompareScenarios(results, "shoal", "kpa"));
    rlq_vs_kpa.push_back(CompareScenarios(results, "rl-q", "kpa"));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ss_median = [&] {
    std::vector<double> v;
    for (const auto& c : shoal_vs_kpa) v.push_back(c.score);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }();

  std::printf(
      "geometric means over the 5 workloads, policy / kpa (lower is better); score = "
      "(cold * inst-s * p99)^(-1/3), above 1: the policy is better\n");
  std::printf("%-6s %-6s %10s %10s %10s %10s\n", "seed", "policy", "xcold", "xinst-s", "xp99",
              "score");
  for (int k = 0; k < seeds; ++k) {
    for (const auto* v : {&shoal_vs_kpa, &rlq_vs_kpa}) {
      const ScenarioComparison& c = (*v)[k];
      std::printf("%-6llu %-6s %10.3f %10.3f %10.3f %10.3f\n",
                  static_cast<unsigned long long>(seed + k), v == &shoal_vs_kpa ? "shoal" : "rl-q",
                  c.cold, c.instance_s, c.p99, c.score);
    }
  }
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::vector<double>{v.front(), v[v.size() / 2], v.back()};
  };
  std::vector<double> cold, inst, p99, score;
  for (const auto& c : shoal_vs_kpa) {
    cold.push_back(c.cold);
    inst.push_back(c.instance_s);
    p99.push_back(c.p99);
    score.push_back(c.score);
  }
  const auto sc = stats(cold), si = stats(inst), sp = stats(p99), ss = stats(score);
  std::printf("\nshoal vs kpa over %d seed(s), median [min, max]:\n", seeds);
  std::printf("  cold-start requests %.3fx [%.3f, %.3f]  (target <= 0.5)\n", sc[1], sc[0], sc[2]);
  std::printf("  instance-seconds    %.3fx [%.3f, %.3f]  (target <= 0.8)\n", si[1], si[0], si[2]);
  std::printf("  p99 latency         %.3fx [%.3f, %.3f]  (target <= 1)\n", sp[1], sp[0], sp[2]);
  std::printf(
      "  combined score      %.3f  [%.3f, %.3f]  (geometric mean of kpa/shoal over the "
      "three; > 1: shoal better; falls if any of the three worsens)\n",
      ss[1], ss[0], ss[2]);
  std::printf("simulated %zu runs in %.1f s\n", total, secs);

  // ---- learned vs KPA + 60 s keep-alive, and vs shoal --------------------------------------
  const auto t1 = std::chrono::steady_clock::now();
  std::printf(
      "\nlearned (deploy/policies/learned-v1.json, compiled in) vs kpa+60s (KPA with a "
      "60 s idle keep-alive) and vs shoal, seeds %llu..%llu; 'later' = cold-start "
      "requests after each function's first instance (counted >= 1 in ratios)\n",
      first_seed, last_seed);
  std::printf("%-8s %-6s %-9s %9s %8s %11s %9s %7s %7s %7s\n", "workload", "seed", "policy",
              "requests", "later", "inst-s", "p99 ms", "xlater", "xinst", "xp99");
  const char* compared[] = {"kpa+60s", "shoal", "learned"};
  std::map<std::string, std::map<std::string, Point>> sums;  // workload -> policy -> summed
  std::vector<double> g_cold, g_inst, g_p99;                 // per seed, geometric means
  for (int k = 0; k < seeds; ++k) {
    double lc = 0, li = 0, lp = 0;
    for (const char* workload : kScenarioWorkloads) {
      std::map<std::string, FunctionReport> row;
      for (const char* policy : compared) {
        const bool kpa60 = std::string(policy) == "kpa+60s";
        auto r = Run(workload, kpa60 ? "kpa" : policy, seed + k, scale, kpa60 ? 60 : -1);
        if (!r.ok()) {
          std::fprintf(stderr, "bench-autoscale: %s\n", r.status().ToString().c_str());
          return 1;
        }
        row[policy] = *r;
        sums[workload][policy].Add(*r);
      }
      const FunctionReport& b = row["kpa+60s"];
      for (const char* policy : compared) {
        const FunctionReport& t = row[policy];
        const double later = std::max<double>(1, t.cold_requests - t.first_cold_requests);
        const double blater = std::max<double>(1, b.cold_requests - b.first_cold_requests);
        std::printf("%-8s %-6llu %-9s %9llu %8llu %11.0f %9.1f %7.2f %7.2f %7.2f\n", workload,
                    static_cast<unsigned long long>(seed + k), policy,
                    static_cast<unsigned long long>(t.requests),
                    static_cast<unsigned long long>(t.cold_requests - t.first_cold_requests),
                    t.instance_s, t.p99_latency_s * 1e3, later / blater,
                    t.instance_s / b.instance_s, t.p99_latency_s / b.p99_latency_s);
        if (std::string(policy) == "learned") {
          lc += std::log(later / blater);
          li += std::log(t.instance_s / b.instance_s);
          lp += std::log(t.p99_latency_s / b.p99_latency_s);
        }
      }
    }
    const double n = static_cast<double>(std::size(kScenarioWorkloads));
    g_cold.push_back(std::exp(lc / n));
    g_inst.push_back(std::exp(li / n));
    g_p99.push_back(std::exp(lp / n));
  }
  const auto lc = stats(g_cold), li = stats(g_inst), lp = stats(g_p99);
  std::printf(
      "\nlearned vs kpa+60s, geometric mean over the 5 workloads, median [min, max] over "
      "%d seed(s):\n",
      seeds);
  std::printf(
      "  cold-start requests after the first instance %.3fx [%.3f, %.3f]  (target <= 0.5)"
      " %s\n",
      lc[1], lc[0], lc[2], lc[1] <= 0.5 ? "met" : "MISSED");
  std::printf(
      "  instance-seconds                             %.3fx [%.3f, %.3f]  (target <= 0.8)"
      " %s\n",
      li[1], li[0], li[2], li[1] <= 0.8 ? "met" : "MISSED");
  std::printf(
      "  p99 latency                                  %.3fx [%.3f, %.3f]  (target <= 1.0)"
      " %s\n",
      lp[1], lp[0], lp[2], lp[1] <= 1.0 ? "met" : "MISSED");

  // Dominance over shoal per workload, on the sums over seeds (p99: mean over seeds, within
  // the latency histogram's 1% resolution).
  int dominated = 0;
  std::printf(
      "\nlearned vs shoal per workload (sums over seeds): dominates = no worse on any of "
      "the three, better on one\n");
  std::printf("%-8s %10s %10s %12s %12s %9s %9s %s\n", "workload", "later L", "later S", "inst-s L",
              "inst-s S", "p99 L", "p99 S", "verdict");
  for (const char* workload : kScenarioWorkloads) {
    const Point& l = sums[workload]["learned"];
    const Point& sh = sums[workload]["shoal"];
    const bool no_worse = l.later_cold <= sh.later_cold && l.instance_s <= sh.instance_s &&
                          l.p99_s <= sh.p99_s * 1.01;
    const bool better = l.later_cold < sh.later_cold || l.instance_s < sh.instance_s * 0.99 ||
                        l.p99_s < sh.p99_s * 0.99;
    const bool dom = no_worse && better;
    dominated += dom;
    std::string why;
    if (!dom) {
      if (l.later_cold > sh.later_cold) why += " more cold starts";
      if (l.instance_s > sh.instance_s) why += " more instance-s";
      if (l.p99_s > sh.p99_s * 1.01) why += " higher p99";
      if (why.empty()) why = " equal";
    }
    std::printf("%-8s %10.0f %10.0f %12.0f %12.0f %9.1f %9.1f %s%s\n", workload, l.later_cold,
                sh.later_cold, l.instance_s, sh.instance_s, 1e3 * l.p99_s / seeds,
                1e3 * sh.p99_s / seeds, dom ? "dominates" : "does not:", why.c_str());
  }
  std::printf("learned dominates shoal on %d of 5 workloads (target >= 4) %s\n", dominated,
              dominated >= 4 ? "met" : "MISSED");

  // ---- the frontier ---------------------------------------------------------------------------
  // Every point is run on each seed; a row shows the medians over seeds, and its ratio to the
  // fixed frontier is taken per seed (each seed's own fixed keep-alives) and summarised as the
  // median [min-max].
  std::printf(
      "\nfrontier (seeds %llu..%llu, median per coordinate): cold-start requests after "
      "the first instance per 1000 requests vs instance-seconds; fixed = reactive scaling "
      "with a fixed idle keep-alive (the baseline frontier: its Pareto points, linear "
      "between them), learned over costWeight (coldWeight 1), shoal over "
      "firstIdleWindow, kpa and rl-q over their idle keep-alive; 'vs frontier' = "
      "inst-s / the frontier's at the same cold rate, per seed, median [min-max]\n",
      first_seed, last_seed);
  std::printf("%-8s %-8s %-10s %9s %10s %8s  %s\n", "workload", "policy", "knob", "cold/1k",
              "inst-s", "p99 ms", "vs frontier");
  const double keep_alives[] = {10, 30, 60, 120, 300, 600, 1200};
  const double cost_weights[] = {1.0 / 10, 1.0 / 30, 1.0 / 60, 1.0 / 120, 1.0 / 300, 1.0 / 600};
  const double first_idle[] = {30, 90, 300};
  const double knative_keep_alives[] = {0, 60, 300};
  struct Swept {
    const char* policy;
    std::string knob;
    double keep_alive_s = -1;
    std::map<std::string, double> params;
  };
  std::vector<Swept> swept;
  char knob[32];
  for (double w : cost_weights) {
    std::snprintf(knob, sizeof knob, "cw 1/%.0f", 1 / w);
    swept.push_back({"learned", knob, -1, {{"costWeight", w}}});
  }
  for (double fi : first_idle) {
    std::snprintf(knob, sizeof knob, "first %gs", fi);
    swept.push_back({"shoal", knob, -1, {{"firstIdleWindow", fi}}});
  }
  for (const char* policy : {"kpa", "rl-q"}) {
    for (double ka : knative_keep_alives) {
      std::snprintf(knob, sizeof knob, "ka %gs", ka);
      swept.push_back({policy, knob, ka, {}});
    }
  }
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "bench-autoscale: %s\n", st.ToString().c_str());
    return 1;
  };
  int below = 0, points = 0, seed_points = 0, seed_above = 0;
  double worst = 0;  // the learned points' largest per-seed ratio
  std::vector<std::string> above;
  for (const char* workload : kScenarioWorkloads) {
    // Runs one point on every seed: the medians, and the per-seed ratios to `fixed` (if given).
    auto run = [&](const char* policy, double ka, const std::map<std::string, double>& params,
                   const std::vector<std::vector<std::pair<double, double>>>* fixed,
                   std::vector<Point>* per_seed, std::vector<double>* ratios) -> Status {
      for (int k = 0; k < seeds; ++k) {
        auto r = Run(workload, policy, seed + k, scale, ka, params);
        if (!r.ok()) return r.status();
        Point p;
        p.Add(*r);
        per_seed->push_back(p);
        if (fixed) ratios->push_back(p.instance_s / FrontierAt((*fixed)[k], p.cold_per_1k()));
      }
      return Status();
    };
    auto print = [&](const char* policy, const std::string& name, const std::vector<Point>& ps,
                     const std::vector<double>& ratios) {
      std::vector<double> cold, inst, p99;
      for (const Point& p : ps) {
        cold.push_back(p.cold_per_1k());
        inst.push_back(p.instance_s);
        p99.push_back(p.p99_s * 1e3);
      }
      std::string note;
      if (!ratios.empty()) {
        const double m = Median(ratios);
        const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
        char buf[80];
        std::snprintf(buf, sizeof buf, "%.3fx [%.3f-%.3f]%s", m, *lo, *hi,
                      m <= 1.01 ? "" : "  ABOVE");
        note = buf;
      }
      std::printf("%-8s %-8s %-10s %9.2f %10.0f %8.1f  %s\n", workload, policy, name.c_str(),
                  Median(cold), Median(inst), Median(p99), note.c_str());
    };
    std::vector<std::vector<std::pair<double, double>>> fixed(seeds);
    for (double ka : keep_alives) {
      std::vector<Point> ps;
      if (Status st = run("reactive", ka, {}, nullptr, &ps, nullptr); !st.ok()) return fail(st);
      for (int k = 0; k < seeds; ++k) fixed[k].push_back({ps[k].cold_per_1k(), ps[k].instance_s});
      std::snprintf(knob, sizeof knob, "ka %gs", ka);
      print("fixed", knob, ps, {});
    }
    for (const Swept& sw : swept) {
      std::vector<Point> ps;
      std::vector<double> ratios;
      if (Status st = run(sw.policy, sw.keep_alive_s, sw.params, &fixed, &ps, &ratios); !st.ok()) {
        return fail(st);
      }
      print(sw.policy, sw.knob, ps, ratios);
      if (std::string(sw.policy) != "learned") continue;
      ++points;
      for (double r : ratios) {
        ++seed_points;
        seed_above += r > 1.01;
        worst = std::max(worst, r);
      }
      const double m = Median(ratios);
      if (m <= 1.01) {
        ++below;
      } else {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s %s %.2fx", workload, sw.knob.c_str(), m);
        above.push_back(buf);
      }
    }
  }
  std::printf(
      "learned points on or below the fixed keep-alive frontier (median ratio <= 1.01): "
      "%d of %d",
      below, points);
  for (size_t i = 0; i < above.size(); ++i) {
    std::printf("%s%s", i == 0 ? "; above: " : ", ", above[i].c_str());
  }
  std::printf(
      "\nper seed: %d of %d learned (point, seed) pairs above 1.01x; the largest ratio "
      "%.3fx\n",
      seed_above, seed_points, worst);
  std::printf("learned sections simulated in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  // ---- busy-time sizing ------------------------------------------------------------------------
  std::printf(
      "\nbusy-time sizing (learned's table, deploy/policies/learned-v2.json) vs the same "
      "policy with shoal's sizing (x1.00, hold 10 s, every interval), kpa (Knative "
      "defaults) and shoal; sums over seeds %llu..%llu (p99: mean over seeds); 'matches' "
      "= within 1%% (p99: the latency histogram's resolution), no more cold starts\n",
      first_seed, last_seed);
  std::printf("%-8s %-15s %8s %12s %9s %10s %s\n", "workload", "policy", "later", "inst-s",
              "p99 ms", "weighted", "learned vs it");
  const LearnedWeights lw;
  int beats_all = 0;
  double log_sizing = 0;
  for (const char* workload : kScenarioWorkloads) {
    struct Variant {
      const char* name;
      const char* policy;
      int sizing;
    };
    const Variant variants[] = {{"learned", "learned", -1},
                                {"learned-shoalsz", "learned", int(SizingTable::kDefaultAction)},
                                {"shoal", "shoal", -1},
                                {"kpa", "kpa", -1}};
    std::map<std::string, Point> pts;
    std::map<std::string, double> weighted;
    for (const Variant& v : variants) {
      for (int k = 0; k < seeds; ++k) {
        auto r = Run(workload, v.policy, seed + k, scale, -1, {}, v.sizing);
        if (!r.ok()) return fail(r.status());
        pts[v.name].Add(*r);
        weighted[v.name] += lw.cost_weight * r->instance_s + lw.cold_weight * r->cold_requests +
                            lw.miss_weight * r->slo_violations;
      }
    }
    const Point& l = pts["learned"];
    bool all = true;
    for (const Variant& v : variants) {
      const Point& o = pts[v.name];
      std::string verdict;
      if (std::string(v.name) != "learned") {
        const bool cold_ok = l.later_cold <= o.later_cold;
        const bool inst_ok = l.instance_s <= o.instance_s * 1.01;
        const bool p99_ok = l.p99_s <= o.p99_s * 1.01;
        const bool better = l.later_cold < o.later_cold || l.instance_s < o.instance_s * 0.99 ||
                            l.p99_s < o.p99_s * 0.99;
        verdict = cold_ok && inst_ok && p99_ok ? (better ? "beats" : "matches") : "worse on";
        if (!cold_ok) verdict += " cold";
        if (!inst_ok) verdict += " inst-s";
        if (!p99_ok) verdict += " p99";
        if (std::string(v.name) != "learned-shoalsz") all = all && cold_ok && inst_ok && p99_ok;
      }
      std::printf("%-8s %-15s %8.0f %12.0f %9.1f %10.1f %s\n", workload, v.name, o.later_cold,
                  o.instance_s, 1e3 * o.p99_s / seeds, weighted[v.name], verdict.c_str());
    }
    beats_all += all;
    log_sizing += std::log(weighted["learned"] / weighted["learned-shoalsz"]);
  }
  const double sizing_ratio = std::exp(log_sizing / std::size(kScenarioWorkloads));
  std::printf(
      "learned (with its sizing table) beats or matches both kpa and shoal on cold starts, "
      "instance-seconds and p99 on %d of 5 workloads; its sizing table against shoal's "
      "sizing, weighted cost (costWeight x inst-s + cold requests + slo misses), "
      "geometric mean over the workloads: %.4fx\n",
      beats_all, sizing_ratio);
  std::printf("RESULT autoscale_learned_sizing_vs_shoal_sizing ratio=%.4f\n", sizing_ratio);
  std::printf("RESULT autoscale_learned_beats_or_matches_kpa_and_shoal ratio=%.3f\n",
              beats_all / 5.0);
  std::printf("RESULT autoscale_learned_vs_kpa60_cold ratio=%.3f\n", lc[1]);
  std::printf("RESULT autoscale_learned_vs_kpa60_inst ratio=%.3f\n", li[1]);
  std::printf("RESULT autoscale_learned_vs_kpa60_p99 ratio=%.3f\n", lp[1]);
  std::printf("RESULT autoscale_learned_dominates_shoal ratio=%.3f\n", dominated / 5.0);
  std::printf("RESULT autoscale ratio=%.3f\n", ss_median);
  return 0;
}
