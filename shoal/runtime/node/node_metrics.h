// shoald's Prometheus metrics: one registry for the node, per-function handles cached so
// the request path touches only atomics.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

namespace shoal {

class NodeMetrics;

// The metrics of one function; cheap to use from any gateway loop.
class FunctionMetrics {
 public:
  FunctionMetrics(NodeMetrics& node, const std::string& function);
  ~FunctionMetrics();
  void CountRequest(int status, double seconds);
  void CountColdStart(double seconds);

 private:
  prometheus::Counter& CounterFor(int status);
  NodeMetrics& node_;
  std::string function_;
  std::mutex mu_;
  std::array<std::atomic<prometheus::Counter*>, 600> by_status_{};
  prometheus::Histogram* latency_;
  prometheus::Counter* cold_starts_;
  prometheus::Histogram* cold_start_seconds_;
};

class NodeMetrics {
 public:
  NodeMetrics();
  std::string Serialize() const;
  prometheus::Registry& registry() { return *registry_; }

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& request_seconds;
  prometheus::Family<prometheus::Counter>& cold_starts;
  prometheus::Family<prometheus::Histogram>& cold_start_seconds;
  // Instance starts by path (zygote: forked from the function's zygote; spawn: a new
  // shoal-fn), and their start-to-ready time per path.
  prometheus::Family<prometheus::Counter>& instance_starts;
  prometheus::Family<prometheus::Histogram>& instance_start_seconds;
  void CountInstanceStart(const std::string& function, const std::string& path, double seconds);
  prometheus::Family<prometheus::Gauge>& inflight;
  prometheus::Family<prometheus::Gauge>& queued;
  prometheus::Family<prometheus::Gauge>& instances;
  prometheus::Family<prometheus::Gauge>& pool_bytes;
  prometheus::Family<prometheus::Gauge>& pool_backend;
  prometheus::Family<prometheus::Gauge>& dataplane_mode;
  prometheus::Family<prometheus::Gauge>& dataplane_events;
  prometheus::Family<prometheus::Gauge>& dataplane_bytes;
  prometheus::Family<prometheus::Gauge>& dataplane_inflight;
  prometheus::Family<prometheus::Counter>& gateway_rejections;
  prometheus::Family<prometheus::Counter>& forwards;  // cluster mode: {function, node, result}
  // The autoscaler's decisions per function (instance manager, every control interval).
  // Language-model functions' load reports, summed over their instances.
  prometheus::Family<prometheus::Gauge>& tokens_in_flight;
  prometheus::Family<prometheus::Gauge>& sequences;
  prometheus::Family<prometheus::Gauge>& autoscaler_desired;
  prometheus::Family<prometheus::Gauge>& autoscaler_actual;
  prometheus::Family<prometheus::Gauge>& autoscaler_prewarm;
  prometheus::Family<prometheus::Gauge>& autoscaler_prewarmed;
  prometheus::Family<prometheus::Gauge>& autoscaler_keep_alive;
  prometheus::Family<prometheus::Gauge>& autoscaler_target;
  prometheus::Family<prometheus::Gauge>& autoscaler_panic;
  prometheus::Family<prometheus::Counter>& autoscaler_decisions;
  prometheus::Family<prometheus::Counter>& autoscaler_prewarm_starts;
  prometheus::Family<prometheus::Counter>& autoscaler_cold_starts_avoided;
  prometheus::Family<prometheus::Counter>& autoscaler_cold_requests;
  // Placement of instance starts (kind: warm, cached, cold, unschedulable).
  prometheus::Family<prometheus::Counter>& placement_decisions;
  // FL leaves whose GPU fold failed (they answered that update 502 and fold on the CPU since).
  prometheus::Family<prometheus::Counter>& fl_gpu_fallbacks;
  // Updates a robust FL job's rule excluded or down-weighted (spec.aggregation.robust), by job,
  // client id and the rule that ran.
  prometheus::Family<prometheus::Counter>& fl_suspect_updates;
};

}  // namespace shoal
