#include "shoal/tools/simulator/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "shoal/tools/simulator/workloads.h"

namespace shoal {
namespace {

// The test's own policy: just enough instances for what is in the system now.
ScalingDecision Reactive(const FunctionSignals& s) {
  ScalingDecision d;
  d.replicas =
      static_cast<uint32_t>(std::ceil(static_cast<double>(s.inflight + s.queued) / s.concurrency));
  return d;
}

// Erlang C: mean wait in queue of M/M/c.
double ErlangCWait(double lambda, double mu, int c) {
  const double a = lambda / mu, rho = a / c;
  double term = 1, sum = 0;
  for (int k = 0; k < c; ++k) {
    sum += term;
    term *= a / (k + 1);
  }
  const double tail = term / (1 - rho);  // a^c / c! / (1 - rho)
  const double p_wait = tail / (sum + tail);
  return p_wait / (c * mu - lambda);
}

// Adds the function `name` with service times from `service` to `cfg`; the test sets the rest.
FunctionConfig& AddFunction(SimulatorConfig& cfg, std::string name,
                            Distribution service = FunctionConfig{}.service) {
  FunctionConfig& f = cfg.functions.emplace_back();
  f.name = std::move(name);
  f.service = std::move(service);
  return f;
}

SimulatorConfig FixedPool(uint32_t c, double mean_service) {
  SimulatorConfig cfg;
  cfg.cold_start = ColdStartModel::None();
  FunctionConfig& f = AddFunction(cfg, "f", Distribution::Exponential(mean_service));
  f.initial_replicas = c;
  f.min_scale = c;
  f.max_scale = c;
  return cfg;
}

TEST(Simulator, MMcQueueWaitMatchesErlangC) {
  const double lambda = 8, mu = 1;
  const int c = 10;
  const double expected = ErlangCWait(lambda, mu, c);  // 0.2046 s
  ASSERT_NEAR(expected, 0.2046, 1e-3);
  SimulatorConfig cfg = FixedPool(c, 1 / mu);
  cfg.warmup_s = 500;
  cfg.seed = 7;
  auto src = MakePoisson(0, lambda, 150'000, 11);  // 1.2 million requests
  auto r = Simulator(cfg).Run(*src);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const FunctionReport& f = r->functions[0];
  EXPECT_GT(f.requests, 1'150'000u);
  EXPECT_NEAR(f.mean_queue_wait_s, expected, 0.03 * expected);
  EXPECT_NEAR(f.mean_service_s, 1 / mu, 0.01);
  EXPECT_NEAR(f.mean_latency_s, expected + 1 / mu, 0.01 * (expected + 1 / mu));
  EXPECT_EQ(f.cold_starts, 0u);
  // Cost: 10 instances for the whole run, idle a fraction 1 - rho = 0.2 of it.
  EXPECT_NEAR(f.instance_s, c * r->end_s, 1e-6 * c * r->end_s);
  EXPECT_NEAR(f.idle_instance_s / f.instance_s, 1 - lambda / (c * mu), 0.005);
}

TEST(Simulator, MM1ResponseTimeIsOneOverMuMinusLambda) {
  const double lambda = 0.5, mu = 1;
  SimulatorConfig cfg = FixedPool(1, 1 / mu);
  cfg.warmup_s = 200;
  auto src = MakePoisson(0, lambda, 800'000, 3);  // 400k requests
  auto r = Simulator(cfg).Run(*src);
  ASSERT_TRUE(r.ok());
  const FunctionReport& f = r->functions[0];
  EXPECT_NEAR(f.mean_latency_s, 1 / (mu - lambda), 0.03 * 2.0);  // 2.0 s
  // M/M/1 response time is exponential with rate mu - lambda: median ln2 / 0.5, p99 ln100 / 0.5.
  EXPECT_NEAR(f.p50_latency_s, std::log(2.0) / (mu - lambda), 0.04 * 1.386);
  EXPECT_NEAR(f.p99_latency_s, std::log(100.0) / (mu - lambda), 0.04 * 9.21);
}

// Every figure of a function's report and its series, doubles to the last bit, as text to
// compare whole.
std::string Figures(const FunctionReport& r) {
  std::ostringstream o;
  o << std::setprecision(17) << r.name << ": requests " << r.requests << ", latency mean "
    << r.mean_latency_s << " p50 " << r.p50_latency_s << " p99 " << r.p99_latency_s
    << ", queue wait " << r.mean_queue_wait_s << ", service " << r.mean_service_s
    << ", slo violations " << r.slo_violations << ", cold requests " << r.cold_requests
    << " (first " << r.first_cold_requests << "), cold starts " << r.cold_starts << " ("
    << r.cold_start_s << " s), instance s " << r.instance_s << " (idle " << r.idle_instance_s
    << "), placement failures " << r.placement_failures << "; series:";
  for (const SeriesPoint& p : r.series) {
    o << " " << p.t << ":" << p.desired << "/" << p.ready << "/" << p.starting << "/" << p.arrivals
      << "/" << p.inflight << "/" << p.queued;
  }
  return o.str();
}

// A tick's counts, as one line to compare whole.
std::string Counts(const FunctionSignals& s) {
  std::ostringstream o;
  o << "arrivals " << s.arrivals << ", completions " << s.completions << ", inflight " << s.inflight
    << ", queued " << s.queued << ", ready " << s.ready << ", busy " << s.busy << ", idle "
    << s.idle << ", starting " << s.starting << ", cold starts " << s.cold_starts;
  return o.str();
}

SimulationReport RunScaled(uint64_t sim_seed) {
  SimulatorConfig cfg;
  cfg.seed = sim_seed;
  cfg.nodes = {{"n0", {4, 8192, 0}, 1.0, {}}, {"n1", {4, 8192, 0}, 0.5, {}}};
  for (int i = 0; i < 3; ++i) {
    // (append: "f" + std::to_string(i) here trips GCC 12's -Wrestrict false positive at -O3)
    FunctionConfig& f = AddFunction(cfg, std::string("f").append(std::to_string(i)));
    f.concurrency = 2;
    f.max_scale = 4;
    f.keep_alive_s = 5;
    f.slo_s = 0.5;
    f.policy = Reactive;
  }
  auto src = MakeZipf(0, 3, 1.0, 20, 300, 5);
  auto r = Simulator(cfg).Run(*src);
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

TEST(Simulator, DeterministicFromTheSeed) {
  SimulationReport a = RunScaled(1), b = RunScaled(1), c = RunScaled(2);
  ASSERT_EQ(a.functions.size(), 3u);
  EXPECT_GT(a.total.cold_starts, 0u);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.end_s, b.end_s);
  for (size_t i = 0; i < a.functions.size(); ++i) {
    EXPECT_EQ(Figures(a.functions[i]), Figures(b.functions[i]));
  }
  EXPECT_EQ(Figures(a.total), Figures(b.total));
  EXPECT_EQ(a.total.requests, c.total.requests);  // same arrivals
  EXPECT_NE(a.total.mean_latency_s, c.total.mean_latency_s);
  EXPECT_NE(a.total.cold_start_s, c.total.cold_start_s);
}

TEST(Simulator, ScalingFromZeroCountsColdStartsWithTheirCost) {
  SimulatorConfig cfg;
  cfg.cold_start = ColdStartModel::Fixed(2.0);
  FunctionConfig& f = AddFunction(cfg, "f", Distribution::Constant(0.5));
  f.keep_alive_s = 10;
  std::vector<FunctionSignals> seen;
  f.policy = [&seen](const FunctionSignals& s) {
    seen.push_back(s);
    return Reactive(s);
  };
  std::vector<Arrival> arrivals = {{1.0, 0, -1}};
  for (int i = 0; i < 5; ++i) arrivals.push_back({100.5, 0, -1});
  auto src = FromVector(arrivals);
  auto r = Simulator(cfg).Run(*src);
  ASSERT_TRUE(r.ok());
  const FunctionReport& rep = r->functions[0];
  EXPECT_EQ(rep.requests, 6u);
  // The first request waits for one cold start (2 s) and runs 0.5 s; the instance idles 10 s
  // and stops. The burst starts one instance at once and, at the tick of 102 s, four more.
  EXPECT_EQ(rep.cold_starts, 6u);
  EXPECT_DOUBLE_EQ(rep.cold_start_s, 12.0);
  // Waited for a cold start: the first request; the burst's first (on the instance ready at
  // 102.5); and two more taken at 104 by the instances started at the tick, whose ready events
  // were queued before the completion due at the same instant.
  EXPECT_EQ(rep.cold_requests, 4u);
  ASSERT_GE(seen.size(), 52u);
  // Tick at t=4: the first instance became ready at 3.0 after 2 s.
  EXPECT_EQ(seen[1].now_s, 4.0);
  EXPECT_EQ(seen[1].cold_starts, 1u);
  EXPECT_DOUBLE_EQ(seen[1].cold_start_cost_s, 2.0);
  EXPECT_EQ(seen[1].completions, 1u);
  EXPECT_DOUBLE_EQ(seen[1].p99_latency_s, 2.5);
  EXPECT_DOUBLE_EQ(seen[1].mean_queue_wait_s, 2.0);
  // Tick at 102: five queued behind one starting instance; the policy asks for five.
  EXPECT_EQ(seen[50].now_s, 102.0);
  EXPECT_EQ(seen[50].queued, 5u);
  EXPECT_EQ(seen[50].starting, 1u);
  EXPECT_EQ(seen[50].ready, 0u);
  EXPECT_EQ(rep.series[50].desired, 5u);
  EXPECT_EQ(rep.series[50].starting, 5u);
}

TEST(Simulator, SignalsFollowTheStructsDefinitions) {
  SimulatorConfig cfg;
  cfg.cold_start = ColdStartModel::None();
  FunctionConfig& f = AddFunction(cfg, "f", Distribution::Constant(1.0));
  f.concurrency = 2;
  f.initial_replicas = 1;
  f.min_scale = 1;
  f.max_scale = 1;
  f.slo_s = 1.5;
  cfg.duration_s = 5;
  std::vector<FunctionSignals> seen;
  f.policy = [&seen](const FunctionSignals& s) {
    seen.push_back(s);
    return ScalingDecision{1, 0, 0, 0, false};
  };
  auto src = FromVector({{0.5, 0, -1}, {0.6, 0, -1}, {0.7, 0, -1}});
  auto r = Simulator(cfg).Run(*src);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(seen.size(), 2u);
  const FunctionSignals& a = seen[0];  // t=2: two ran 0.5-1.5 and 0.6-1.6, the third 1.5-2.5
  EXPECT_EQ(a.function, "f");
  EXPECT_EQ(a.now_s, 2.0);
  EXPECT_EQ(a.interval_s, 2.0);
  EXPECT_EQ(Counts(a),
            "arrivals 3, completions 2, inflight 1, queued 0, ready 1, busy 1, idle 0, starting 0, "
            "cold starts 0");
  EXPECT_NEAR(a.mean_queue_wait_s, 0.8 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(a.mean_service_s, 1.0);
  EXPECT_DOUBLE_EQ(a.p99_latency_s, 1.0);
  EXPECT_EQ(a.concurrency, 2u);
  EXPECT_EQ(a.max_scale, 1u);
  EXPECT_EQ(a.slo_s, 1.5);
  const FunctionSignals& b = seen[1];  // t=4
  EXPECT_EQ(Counts(b),
            "arrivals 0, completions 1, inflight 0, queued 0, ready 1, busy 0, idle 1, starting 0, "
            "cold starts 0");
  EXPECT_NEAR(b.p99_latency_s, 1.8, 1e-12);
  EXPECT_EQ(r->functions[0].slo_violations, 1u);  // the 1.8 s one
}

FunctionReport RunTimer(double period) {
  SimulatorConfig cfg;
  cfg.cold_start = ColdStartModel::Fixed(0.5);
  cfg.duration_s = 200;
  FunctionConfig& f = AddFunction(cfg, "cron", Distribution::Constant(0.1));
  f.keep_alive_s = 10;
  f.policy = Reactive;
  auto src = MakeTimer(0, period, 0, 200);
  auto r = Simulator(cfg).Run(*src);
  EXPECT_TRUE(r.ok());
  return r->functions[0];
}

TEST(Simulator, TimerJustAboveKeepAliveGoesColdEveryTime) {
  // Idle gap = period - service (0.1 s) (- the cold start on a cold run): 11 s > 10 s.
  const FunctionReport above = RunTimer(11.0);
  EXPECT_EQ(above.requests, 19u);
  EXPECT_EQ(above.cold_starts, 19u);
  EXPECT_EQ(above.cold_requests, 19u);
  // Just below: one cold start, then warm for the rest of the run.
  const FunctionReport below = RunTimer(9.5);
  EXPECT_EQ(below.requests, 22u);
  EXPECT_EQ(below.cold_starts, 1u);
  EXPECT_EQ(below.cold_requests, 1u);
  // Instance-seconds: 18 x (0.5 cold + 0.1 service + 10 keep-alive), plus the last instance
  // from 198 s to the end of the run at 200 s; vs. one instance kept warm the whole run.
  EXPECT_NEAR(above.instance_s, 18 * 10.6 + 2.0, 1e-6);
  EXPECT_NEAR(below.instance_s, 200.0, 1e-9);
}

TEST(Simulator, PlacementLimitsScaleOutAndUsesCheapestNode) {
  SimulatorConfig cfg;
  cfg.cold_start = ColdStartModel::Fixed(1.0);
  cfg.nodes = {{"slow", {2, 8192, 0}, 3.0, {}}, {"fast", {1, 8192, 0}, 1.0, {}}};
  AddFunction(cfg, "f", Distribution::Constant(50)).policy = Reactive;
  std::vector<Arrival> burst(5, Arrival{0.1, 0, -1});
  auto src = FromVector(burst);
  auto r = Simulator(cfg).Run(*src);
  ASSERT_TRUE(r.ok());
  const FunctionReport& rep = r->functions[0];
  EXPECT_EQ(rep.cold_starts, 3u);  // 3 cores in the cluster
  EXPECT_GT(rep.placement_failures, 0u);
  // The first went to "fast" (1 s); the next two had only "slow" left (3 s each).
  EXPECT_DOUBLE_EQ(rep.cold_start_s, 1.0 + 3.0 + 3.0);
  EXPECT_EQ(rep.requests, 5u);
}

TEST(Simulator, RejectsBadInput) {
  SimulatorConfig cfg = FixedPool(1, 1);
  auto src = FromVector({{1.0, 3, -1}});
  auto r = Simulator(cfg).Run(*src);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("function 3"), std::string::npos);
  cfg.functions[0].concurrency = 0;
  auto none = FromVector({});
  EXPECT_FALSE(Simulator(cfg).Run(*none).ok());
  SimulatorConfig tiny = FixedPool(2, 1);
  tiny.nodes = {{"n", {1, 1024, 0}, 1.0, {}}};
  auto none2 = FromVector({});
  EXPECT_EQ(Simulator(tiny).Run(*none2).status().code(), StatusCode::kResourceExhausted);
}

TEST(ColdStartModel, CachedCodeSkipsDeployment) {
  ColdStartModel m = ColdStartModel::Default();
  EXPECT_LT(m.Mean(true), m.Mean(false));
  std::mt19937_64 rng(1);
  double sum = 0;
  std::vector<double> alloc;
  for (int i = 0; i < 20000; ++i) {
    ColdStartBreakdown c = m.Sample(rng, true);
    EXPECT_EQ(c.deployment_s, 0.0);
    alloc.push_back(c.pod_allocation_s);
    sum += m.Sample(rng, false).total_s();
  }
  EXPECT_NEAR(sum / 20000, m.Mean(false), 0.05 * m.Mean(false));
  std::nth_element(alloc.begin(), alloc.begin() + 10000, alloc.end());
  EXPECT_NEAR(alloc[10000], 0.45, 0.03);  // the lognormal's median
  EXPECT_DOUBLE_EQ(ColdStartModel::Fixed(2).Sample(rng, false).total_s(), 2.0);
  Distribution e = Distribution::Empirical({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(e.Mean(), 2.5);
  for (int i = 0; i < 100; ++i) {
    const double v = e.Sample(rng);
    EXPECT_TRUE(v == 1 || v == 2 || v == 3 || v == 4);
    const double u = Distribution::Uniform(2, 3).Sample(rng);
    EXPECT_TRUE(u >= 2 && u < 3);
  }
}

}  // namespace
}  // namespace shoal
