// bench-autoscale: every scaling policy on the same seeded workloads in the simulator
// (bursty, diurnal, timer-heavy, FL rounds, a 200-function Zipf mix): cold starts, p50/p99,
// SLO violations, instance-seconds, each as a ratio to KPA as Knative runs it with its defaults
// (the anchor, same run, same arrivals; see kpa_policy.h for the Knative code it follows).
// Three ratios are reported, none picked: cold-start requests, instance-seconds and p99. The
// RESULT is their combined score, (cold * inst-s * p99)^(-1/3) of shoal / kpa: above 1 Shoal
// is better, and it falls if any of the three worsens. Median over seeds, with the range.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "shoal/autoscaler/scenarios.h"

using namespace shoal;

int main(int argc, char** argv) {
  double scale = 1.0;
  uint64_t seed = 42;
  int seeds = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--duration-scale") scale = std::stod(argv[++i]);
    else if (a == "--seed") seed = std::stoull(argv[++i]);
    else if (a == "--seeds") seeds = std::stoi(argv[++i]);
  }
  if (seeds < 1) {
    std::fprintf(stderr, "bench-autoscale: --seeds must be >= 1\n");
    return 1;
  }
  const size_t total = seeds * std::size(kScenarioWorkloads) * std::size(kScenarioPolicies);
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::printf("bench-autoscale: simulator, seeds %llu..%llu, default cold-start model "
              "(pod allocation + deployment + scheduling, lognormal), control interval 2 s\n",
              static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed + seeds - 1));
  std::printf("anchor: kpa as Knative runs it with its defaults (60 s stable / 6 s panic window, "
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
      std::printf("cold-start requests after each function's first instance (no online policy "
                  "avoids the first): shoal %llu, kpa %llu\n\n",
                  static_cast<unsigned long long>(later_shoal),
                  static_cast<unsigned long long>(later_kpa));
    }
    shoal_vs_kpa.push_back(CompareScenarios(results, "shoal", "kpa"));
    rlq_vs_kpa.push_back(CompareScenarios(results, "rl-q", "kpa"));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::printf("geometric means over the 5 workloads, policy / kpa (lower is better); score = "
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
  std::printf("  combined score      %.3f  [%.3f, %.3f]  (geometric mean of kpa/shoal over the "
              "three; > 1: shoal better; falls if any of the three worsens)\n",
              ss[1], ss[0], ss[2]);
  std::printf("simulated %zu runs in %.1f s\n", total, secs);
  std::printf("RESULT autoscale ratio=%.3f\n", ss[1]);
  return 0;
}
