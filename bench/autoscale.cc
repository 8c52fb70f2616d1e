// bench-autoscale: every scaling policy on the same seeded workloads in the simulator
// (bursty, diurnal, timer-heavy, FL rounds, a 200-function Zipf mix): cold starts, p50/p99,
// SLO violations, instance-seconds, each as a ratio to KPA with a fixed 1-minute keep-alive
// (the anchor, same run, same arrivals). Lower is better for every ratio.
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
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--duration-scale") scale = std::stod(argv[++i]);
    if (std::string(argv[i]) == "--seed") seed = std::stoull(argv[++i]);
  }
  std::vector<ScenarioResult> results;
  const size_t total = std::size(kScenarioWorkloads) * std::size(kScenarioPolicies);
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const char* workload : kScenarioWorkloads) {
    for (const char* policy : kScenarioPolicies) {
      ScenarioOptions o;
      o.workload = workload;
      o.policy = policy;
      o.seed = seed;
      o.duration_scale = scale;
      auto r = RunScenario(o);
      ++done;
      std::fprintf(stderr, "[%zu/%zu] %s / %s\n", done, total, workload, policy);
      if (!r.ok()) {
        std::fprintf(stderr, "bench-autoscale: %s\n", r.status().ToString().c_str());
        return 1;
      }
      results.push_back(std::move(*r));
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("bench-autoscale: simulator, seed %llu, default cold-start model "
              "(pod allocation + deployment + scheduling, lognormal), control interval 2 s\n",
              static_cast<unsigned long long>(seed));
  std::printf("ratios x* are against kpa (fixed 60 s keep-alive) on the same workload; lower is better\n");
  std::printf("%s", FormatScenarioTable(results, "kpa").c_str());
  // Geometric means of shoal / kpa over the workloads.
  double log_cold = 0, log_inst = 0, log_p99 = 0;
  uint64_t later_shoal = 0, later_kpa = 0;
  int n = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].policy != "shoal") continue;
    for (const auto& b : results) {
      if (b.policy != "kpa" || b.workload != results[i].workload) continue;
      const auto& s = results[i].report.total;
      const auto& k = b.report.total;
      log_cold += std::log(std::max(1.0, double(s.cold_requests)) /
                           std::max(1.0, double(k.cold_requests)));
      log_inst += std::log(s.instance_s / k.instance_s);
      log_p99 += std::log(s.p99_latency_s / k.p99_latency_s);
      later_shoal += s.cold_requests - s.first_cold_requests;
      later_kpa += k.cold_requests - k.first_cold_requests;
      ++n;
    }
  }
  const double cold = std::exp(log_cold / n), inst = std::exp(log_inst / n), p99 = std::exp(log_p99 / n);
  std::printf("shoal vs kpa, geometric mean over %d workloads: cold-start requests %.2fx (target <= 0.5), "
              "instance-seconds %.2fx (target <= 0.8), p99 %.2fx (target <= 1)\n",
              n, cold, inst, p99);
  std::printf("cold-start requests after each function's first instance (no online policy avoids "
              "the first): shoal %llu, kpa %llu\n",
              static_cast<unsigned long long>(later_shoal),
              static_cast<unsigned long long>(later_kpa));
  std::printf("simulated %zu runs in %.1f s\n", results.size(), secs);
  std::printf("RESULT autoscale ratio=%.3f\n", inst);
  return 0;
}
