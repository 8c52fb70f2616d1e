// Simulator throughput probe (not a test: timings do not belong in tests). Prints simulated
// requests per second of wall time for a one-function Poisson workload and a 1000-function
// Zipf mix with scaling and cold starts.
// GCC 12 reports a false -Wrestrict inside std::string at -O3 (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "shoal/tools/simulator/simulator.h"

using namespace shoal;

static ScalingDecision Reactive(const FunctionSignals& s) {
  ScalingDecision d;
  d.replicas = static_cast<uint32_t>(std::ceil(double(s.inflight + s.queued) / s.concurrency));
  return d;
}

static void Probe(const char* name, SimulatorConfig cfg, std::unique_ptr<ArrivalSource> src) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Simulator(std::move(cfg)).Run(*src);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::printf("%s: %s\n", name, r.status().ToString().c_str());
    return;
  }
  std::printf("%-28s %10llu requests %8.3f s wall %8.2f M requests/s  cold starts %llu\n", name,
              static_cast<unsigned long long>(r->total.requests), wall,
              r->total.requests / wall / 1e6,
              static_cast<unsigned long long>(r->total.cold_starts));
}

int main() {
  {
    SimulatorConfig cfg;
    cfg.cold_start = ColdStartModel::None();
    FunctionConfig f;
    f.name = "f";
    f.initial_replicas = f.min_scale = f.max_scale = 64;
    f.service = Distribution::Exponential(0.01);
    cfg.functions.push_back(f);
    Probe("poisson, 64 fixed instances", cfg, MakePoisson(0, 5000, 2000, 1));
  }
  {
    SimulatorConfig cfg;
    for (int i = 0; i < 1000; ++i) {
      FunctionConfig f;
      f.name = "f";
      f.name += std::to_string(i);
      f.concurrency = 4;
      f.service = Distribution::LogNormal(0.05, 1.0);
      f.policy = Reactive;
      cfg.functions.push_back(f);
    }
    Probe("zipf 1000 fns, reactive", cfg, MakeZipf(0, 1000, 1.0, 5000, 2000, 2));
  }
}
