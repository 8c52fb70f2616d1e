// Discrete-event simulator of a serverless cluster: arrivals queue per function (the
// activator's FIFO), instances with per-instance concurrency start through cold starts on the
// node that placement picks, stay warm for the keep-alive and scale as each function's policy
// decides every control interval. Deterministic from the seed; no clocks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/control/autoscaler/signals.h"
#include "shoal/control/placement/placement.h"
#include "shoal/tools/simulator/cold_start_model.h"
#include "shoal/tools/simulator/distribution.h"
#include "shoal/tools/simulator/workloads.h"

namespace shoal {

using ScalingPolicyFn = std::function<ScalingDecision(const FunctionSignals&)>;
using KeepAliveFn = std::function<double(const FunctionSignals&)>;

struct FunctionConfig {
  std::string name;
  uint32_t concurrency = 1;
  uint32_t min_scale = 0;
  uint32_t max_scale = 1000;
  // Instances ready at t = 0 without a cold start (also the fixed target when there is no policy).
  uint32_t initial_replicas = 0;
  Resources resources{1.0, 256.0, 0};
  Distribution service = Distribution::Exponential(0.1);  // used when an arrival has none
  double slo_s = 0;                                       // 0: no objective
  // How long an idle instance above the target stays. A decision's keep_alive_s > 0 wins, then
  // the callback, then this fixed value.
  double keep_alive_s = 60;
  KeepAliveFn keep_alive;
  // Called every control interval. Empty: the target stays at initial_replicas. Either way a
  // request for a function with no instance at all starts one at once (scale from zero).
  ScalingPolicyFn policy;
};

struct NodeConfig {
  std::string name;
  Resources capacity;
  double cold_start_factor = 1.0;   // this node's cold starts take factor x the model's
  std::vector<std::string> cached;  // functions whose code is on the node at t = 0
};

struct SimulatorConfig {
  std::vector<NodeConfig> nodes;  // empty: one node with unlimited capacity
  std::vector<FunctionConfig> functions;
  ColdStartModel cold_start = ColdStartModel::Default();
  double control_interval_s = 2.0;
  // Requests arriving before this are served but left out of the latency figures.
  double warmup_s = 0;
  // The run lasts at least this long (instances are charged until then); it goes on past it
  // until every request has finished.
  double duration_s = 0;
  uint64_t seed = 1;
  bool record_series = true;
};

// One control interval of one function (recorded after the policy's decision).
struct SeriesPoint {
  double t = 0;
  uint32_t desired = 0;  // target: replicas + prewarm, within min..max
  uint32_t ready = 0;
  uint32_t starting = 0;
  uint64_t arrivals = 0;  // during the interval
  uint32_t inflight = 0;
  uint32_t queued = 0;
};

struct FunctionReport {
  std::string name;
  uint64_t requests = 0;  // finished, arrived at or after warmup_s
  double mean_latency_s = 0;
  double p50_latency_s = 0;  // from a log histogram, ~1% resolution
  double p99_latency_s = 0;
  double mean_queue_wait_s = 0;
  double mean_service_s = 0;
  uint64_t slo_violations = 0;
  uint64_t cold_requests = 0;  // requests that waited for an instance's cold start
  // ... of which waited for the function's very first instance: no online policy avoids them.
  uint64_t first_cold_requests = 0;
  uint64_t cold_starts = 0;         // instances started after t = 0 (whole run)
  double cold_start_s = 0;          // their spawn-to-ready seconds summed
  double instance_s = 0;            // spawn to stop (or the end), summed over instances: the cost
  double idle_instance_s = 0;       // ready with nothing in flight
  uint64_t placement_failures = 0;  // scale-ups that found no node
  std::vector<SeriesPoint> series;
};

struct SimulationReport {
  std::vector<FunctionReport> functions;
  FunctionReport total;  // sums; latency figures over all requests; no series
  double end_s = 0;
  uint64_t events = 0;  // processed events (arrivals included)
};

class Simulator {
 public:
  explicit Simulator(SimulatorConfig config) : config_(std::move(config)) {}
  // InvalidArgument for a bad configuration or an arrival naming no configured function.
  Result<SimulationReport> Run(ArrivalSource& arrivals);

 private:
  SimulatorConfig config_;
};

}  // namespace shoal
