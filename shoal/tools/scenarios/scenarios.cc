#include "shoal/tools/scenarios/scenarios.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/tools/simulator/distribution.h"

namespace shoal {
namespace {

struct Workload {
  std::vector<FunctionConfig> functions;
  std::unique_ptr<ArrivalSource> arrivals;
  double duration_s = 0;
  double slo_s = 1.0;
};

FunctionConfig Fn(const std::string& name, uint32_t concurrency, Distribution service, double slo) {
  FunctionConfig f;
  f.name = name;
  f.concurrency = concurrency;
  f.min_scale = 0;
  f.max_scale = 1000;
  f.service = service;
  f.slo_s = slo;
  f.keep_alive_s = 60;  // the platform keep-alive (a fixed minute); kpa and rl-q run without
  return f;
}

// A seeded draw from a generator family: its functions, parameters and arrivals all follow from
// the seed, so training seeds and evaluation seeds never share a workload.
Result<Workload> MakeFamilyWorkload(const std::string& family, uint64_t seed, double k) {
  Workload w;
  std::mt19937_64 rng(seed * 7919 + 17);
  auto uni = [&](double lo, double hi) { return lo + (hi - lo) * UniformUnit(rng); };
  auto logu = [&](double lo, double hi) { return std::exp(uni(std::log(lo), std::log(hi))); };
  auto fn = [&](const std::string& name) {
    const uint32_t conc = static_cast<uint32_t>(1 + std::floor(uni(0, 10)));
    return Fn(name, conc, Distribution::LogNormal(logu(0.05, 0.5), 0.4), 1.0);
  };
  w.duration_s = 3600 * k;
  std::vector<std::unique_ptr<ArrivalSource>> src;
  auto id = [&] { return static_cast<uint32_t>(w.functions.size()); };
  if (family == "poisson") {
    for (int i = 0; i < 8; ++i) {
      src.push_back(MakePoisson(id(), logu(0.002, 2), w.duration_s, rng()));
      w.functions.push_back(fn("poisson-" + std::to_string(i)));
    }
  } else if (family == "diurnal") {
    for (int i = 0; i < 4; ++i) {
      src.push_back(MakeDiurnal(id(), logu(0.01, 5), uni(0.5, 1), uni(600, 3600) * k, w.duration_s,
                                rng(), uni(0, 6.28)));
      w.functions.push_back(fn("diurnal-" + std::to_string(i)));
    }
  } else if (family == "zipf") {
    const uint32_t n = 50;
    for (uint32_t i = 0; i < n; ++i) w.functions.push_back(fn("zipf-" + std::to_string(i)));
    src.push_back(MakeZipf(0, n, uni(0.8, 1.3), uni(5, 50), w.duration_s, rng()));
  } else if (family == "timer") {
    // Periods around the keep-alive: 20 s .. 15 min, log-uniform.
    for (int i = 0; i < 12; ++i) {
      const double period = logu(20, 900);
      src.push_back(
          MakeTimer(id(), period, uni(0, 0.05) * period, w.duration_s, uni(0, period), rng()));
      w.functions.push_back(fn("timer-" + std::to_string(i)));
    }
  } else if (family == "bursty") {
    // BurstGPT-like: gamma inter-arrivals whose shape shifts.
    for (int i = 0; i < 4; ++i) {
      src.push_back(MakeBursty(id(), logu(0.02, 10), uni(0.05, 0.3), uni(1, 3), uni(60, 600),
                               w.duration_s, rng()));
      w.functions.push_back(fn("bursty-" + std::to_string(i)));
    }
  } else if (family == "fl") {
    for (int i = 0; i < 3; ++i) {
      const double period = uni(30, 300);
      src.push_back(MakeFlRounds(id(), static_cast<uint32_t>(uni(4, 64)), period, uni(2, 15),
                                 static_cast<uint32_t>(w.duration_s / period), rng()));
      w.functions.push_back(fn("fl-" + std::to_string(i)));
    }
  } else if (family == "azure") {
    // The Azure Functions 2019 per-minute format: rows of counts, replayed through its parser.
    const int minutes = std::max(1, static_cast<int>(60 * k));
    std::string text = "HashOwner,HashApp,HashFunction,Trigger";
    for (int m = 1; m <= minutes; ++m) text += "," + std::to_string(m);
    text += "\n";
    for (int i = 0; i < 10; ++i) {
      const bool timer = i % 3 == 0;
      const int every = static_cast<int>(uni(1, 12));
      const double per_min = logu(0.05, 30);
      std::poisson_distribution<int> pois(per_min);
      text += "o,a,f" + std::to_string(i) + (timer ? ",timer" : ",http");
      for (int m = 1; m <= minutes; ++m)
        text += "," + std::to_string(timer ? (m % every == 0 ? 1 : 0) : pois(rng));
      text += "\n";
    }
    auto trace = ParseAzureFunctionsCounts(text, rng());
    if (!trace.ok()) return trace.status();
    for (const auto& name : trace->functions) w.functions.push_back(fn(name));
    w.arrivals = FromVector(std::move(trace->arrivals));
    return w;
  } else {
    std::string known;
    for (const char* f : kWorkloadFamilies) known += (known.empty() ? "" : ", ") + std::string(f);
    return InvalidArgument("workload family '" + family + "' unknown: " + known);
  }
  w.arrivals = Merge(std::move(src));
  return w;
}

Result<Workload> MakeWorkload(const ScenarioOptions& o) {
  Workload w;
  const double k = o.duration_scale;
  const uint64_t s = o.seed;
  if (o.workload == "bursty") {
    // One API-like function; gamma inter-arrivals whose burstiness shifts every 2 minutes.
    w.duration_s = 3600 * k;
    w.functions.push_back(Fn("bursty", 10, Distribution::LogNormal(0.08, 0.5), 1.0));
    w.arrivals = MakeBursty(0, 20, 0.1, 2.0, 120, w.duration_s, s);
  } else if (o.workload == "diurnal") {
    // A day compressed into 30 minutes, twice: the rate swings 10x between night and noon.
    w.duration_s = 3600 * k;
    w.functions.push_back(Fn("diurnal", 10, Distribution::LogNormal(0.1, 0.4), 1.0));
    w.arrivals = MakeDiurnal(0, 15, 0.9, 1800 * k, w.duration_s, s);
  } else if (o.workload == "timer") {
    // 20 timer-triggered functions with periods around the 1-minute keep-alive (45..90 s).
    w.duration_s = 3600 * k;
    std::vector<std::unique_ptr<ArrivalSource>> sources;
    for (uint32_t i = 0; i < 20; ++i) {
      w.functions.push_back(
          Fn("timer-" + std::to_string(i), 1, Distribution::LogNormal(0.2, 0.3), 5.0));
      const double period = 45 + 45.0 * i / 19.0;
      sources.push_back(MakeTimer(i, period, 1.0, w.duration_s, 3.0 * i, s + i));
    }
    w.arrivals = Merge(std::move(sources));
  } else if (o.workload == "fl") {
    // FL rounds: 32 clients push updates within 5 s of each other every 90 s.
    w.duration_s = 3600 * k;
    w.functions.push_back(Fn("fl-leaf", 8, Distribution::LogNormal(0.5, 0.2), 5.0));
    w.arrivals = MakeFlRounds(0, 32, 90, 5, static_cast<uint32_t>(40 * k), s);
  } else if (o.workload == "zipf") {
    // 200 functions, Zipf popularity (exponent 1), 100 req/s in total.
    w.duration_s = 1800 * k;
    for (uint32_t i = 0; i < 200; ++i) {
      w.functions.push_back(
          Fn("fn-" + std::to_string(i), 4, Distribution::LogNormal(0.1, 0.5), 1.0));
    }
    w.arrivals = MakeZipf(0, 200, 1.0, 100, w.duration_s, s);
  } else if (o.workload.rfind("gen-", 0) == 0) {
    return MakeFamilyWorkload(o.workload.substr(4), s, k);
  } else if (o.workload == "trace") {
    auto trace = ReadTraceFile(o.trace_path, s);
    if (!trace.ok()) return trace.status();
    for (const auto& name : trace->functions) {
      w.functions.push_back(Fn(name, 4, Distribution::LogNormal(0.1, 0.5), 1.0));
    }
    w.duration_s = trace->arrivals.empty() ? 0 : trace->arrivals.back().t;
    w.arrivals = FromVector(std::move(trace->arrivals));
  } else {
    return InvalidArgument("workload '" + o.workload +
                           "' unknown: bursty, diurnal, timer, fl, zipf or trace");
  }
  return w;
}

}  // namespace

Result<ScenarioResult> RunScenario(const ScenarioOptions& o) {
  auto w = MakeWorkload(o);
  if (!w.ok()) return w.status();
  // The same FunctionAutoscaler shoald builds from a manifest's autoscaling block: shoal with
  // its histogram keep-alive (the platform's minute its fallback); kpa and rl-q as Knative runs
  // them with its defaults: no idle keep-alive of their own (scale-down-delay 0s, instances
  // above the decided scale go at once), the stable window and the scale-to-zero rules of
  // KpaPolicy being all that keeps an instance.
  const bool knative = o.policy == "kpa" || o.policy == "rl-q";
  const double platform_keep_alive = knative ? (o.keep_alive_s >= 0 ? o.keep_alive_s : 0) : 60;
  AutoscalingConfig ac;
  ac.policy = o.policy;
  ac.keep_alive = o.policy == "shoal" ? "histogram" : "fixed";
  ac.fixed_keep_alive_s = platform_keep_alive;
  ac.params = o.params;
  ac.learned_model = o.learned_model;
  ac.learned_sizing_action = o.sizing_action;
  // "reactive": shoald's scaler without a policy (as many instances as the requests present
  // need) with a fixed idle keep-alive: the classic fixed keep-alive baseline.
  const bool reactive = o.policy == "reactive";
  if (reactive && !(o.keep_alive_s >= 0)) {
    return InvalidArgument("policy reactive needs a keep-alive (keep_alive_s >= 0)");
  }
  if (!reactive &&
      (o.policy == "none" || std::find(std::begin(kScenarioPolicies), std::end(kScenarioPolicies),
                                       o.policy) == std::end(kScenarioPolicies))) {
    return InvalidArgument("policy '" + o.policy + "' unknown: kpa, rl-q, shoal or learned");
  }
  if (!reactive) {
    if (auto probe = FunctionAutoscaler::Make(ac); !probe.ok()) return probe.status();
  }
  SimulatorConfig cfg;
  cfg.duration_s = w->duration_s;
  cfg.seed = o.seed;
  cfg.record_series = false;
  cfg.control_interval_s = 2.0;
  for (FunctionConfig& f : w->functions) {
    f.keep_alive_s = platform_keep_alive;
    if (reactive) {
      f.keep_alive_s = o.keep_alive_s;
      const uint32_t slots = f.concurrency;
      f.policy = [slots, ka = o.keep_alive_s](const FunctionSignals& s) {
        ScalingDecision d;
        d.replicas = ClampScale((uint64_t{s.inflight} + s.queued + slots - 1) / slots, s);
        d.keep_alive_s = std::max(ka, 1e-3);
        return d;
      };
      cfg.functions.push_back(f);
      continue;
    }
    std::shared_ptr<FunctionAutoscaler> p(FunctionAutoscaler::Make(ac).value().release());
    if (o.idle_periods) {
      if (auto* l = dynamic_cast<LearnedPolicy*>(&p->policy())) l->set_recorder(o.idle_periods);
    }
    if (o.sizing_samples) {
      o.sizing_samples->resize(w->functions.size());
      if (auto* l = dynamic_cast<LearnedPolicy*>(&p->policy()))
        l->set_sizing_recorder(&(*o.sizing_samples)[cfg.functions.size()]);
    }
    f.policy = [p](const FunctionSignals& s) { return p->Observe(s); };
    cfg.functions.push_back(f);
  }
  Simulator sim(cfg);
  auto report = sim.Run(*w->arrivals);
  if (!report.ok()) return report.status();
  ScenarioResult r;
  r.workload = o.workload;
  r.policy = o.label;
  if (r.policy.empty()) {
    char ka[32];
    std::snprintf(ka, sizeof ka, "+%gs", o.keep_alive_s);
    r.policy = reactive ? "fixed" + std::string(ka + 1)
                        : o.policy + (o.policy == "kpa" && o.keep_alive_s >= 0 ? ka : "");
  }
  r.report = std::move(*report);
  r.slo_s = w->slo_s;
  return r;
}

std::string FormatScenarioTable(const std::vector<ScenarioResult>& results,
                                const std::string& baseline_policy) {
  std::map<std::string, const FunctionReport*> base;
  for (const auto& r : results) {
    if (r.policy == baseline_policy) base[r.workload] = &r.report.total;
  }
  std::string out;
  char line[512];
  // "cold" counts requests that waited for a cold start (what users feel); "starts" counts
  // instance starts, pre-warmed ones included.
  // "later" leaves out the requests that waited for each function's very first instance.
  std::snprintf(line, sizeof line, "%-9s %-7s %9s %7s %8s %6s %9s %9s %9s %7s %11s %7s %7s %7s\n",
                "workload", "policy", "requests", "starts", "cold", "later", "cold/1k", "p50 ms",
                "p99 ms", "slo%", "inst-s", "xcold", "xinst", "xp99");
  out += line;
  for (const auto& r : results) {
    const FunctionReport& t = r.report.total;
    const FunctionReport* b = base.count(r.workload) ? base[r.workload] : nullptr;
    auto ratio = [](double a, double c) { return c > 0 ? a / c : (a > 0 ? INFINITY : 1.0); };
    const double req = static_cast<double>(std::max<uint64_t>(1, t.requests));
    std::snprintf(line, sizeof line,
                  "%-9s %-7s %9llu %7llu %8llu %6llu %9.2f %9.1f %9.1f %7.2f %11.0f %7.2f %7.2f "
                  "%7.2f\n",
                  r.workload.c_str(), r.policy.c_str(), static_cast<unsigned long long>(t.requests),
                  static_cast<unsigned long long>(t.cold_starts),
                  static_cast<unsigned long long>(t.cold_requests),
                  static_cast<unsigned long long>(t.cold_requests - t.first_cold_requests),
                  1000.0 * t.cold_requests / req, t.p50_latency_s * 1e3, t.p99_latency_s * 1e3,
                  100.0 * t.slo_violations / req, t.instance_s,
                  b ? ratio(t.cold_requests, b->cold_requests) : NAN,
                  b ? ratio(t.instance_s, b->instance_s) : NAN,
                  b ? ratio(t.p99_latency_s, b->p99_latency_s) : NAN);
    out += line;
  }
  return out;
}

ScenarioComparison CompareScenarios(const std::vector<ScenarioResult>& results,
                                    const std::string& policy, const std::string& baseline) {
  ScenarioComparison c;
  double log_cold = 0, log_inst = 0, log_p99 = 0;
  for (const auto& r : results) {
    if (r.policy != policy) continue;
    for (const auto& b : results) {
      if (b.policy != baseline || b.workload != r.workload) continue;
      const FunctionReport& s = r.report.total;
      const FunctionReport& k = b.report.total;
      log_cold +=
          std::log(std::max(1.0, double(s.cold_requests)) / std::max(1.0, double(k.cold_requests)));
      log_inst += std::log(s.instance_s / k.instance_s);
      log_p99 += std::log(s.p99_latency_s / k.p99_latency_s);
      ++c.workloads;
    }
  }
  if (c.workloads == 0) return c;
  c.cold = std::exp(log_cold / c.workloads);
  c.instance_s = std::exp(log_inst / c.workloads);
  c.p99 = std::exp(log_p99 / c.workloads);
  c.score = std::pow(c.cold * c.instance_s * c.p99, -1.0 / 3.0);
  return c;
}

std::string FormatScenarioComparison(const ScenarioComparison& c, const std::string& policy,
                                     const std::string& baseline) {
  char line[512];
  std::snprintf(line, sizeof line,
                "%s / %s, geometric mean over %d workload(s): cold-start requests %.3fx, "
                "instance-seconds %.3fx, p99 %.3fx (lower is better); combined score "
                "(cold * inst-s * p99)^(-1/3) = %.3f (above 1: %s better)\n",
                policy.c_str(), baseline.c_str(), c.workloads, c.cold, c.instance_s, c.p99, c.score,
                policy.c_str());
  return line;
}

}  // namespace shoal
