#include "shoal/runtime/node/node_metrics.h"

#include <prometheus/text_serializer.h>

namespace shoal {

namespace {
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
const prometheus::Histogram::BucketBoundaries kColdStartBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

// A metric family registered under `name` (every name is written out at its member below, and
// tests/integration/grafana_dashboard_test.py finds them there) with its # HELP text.
prometheus::Family<prometheus::Counter>& Counters(prometheus::Registry& r, const char* name,
                                                  const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& r, const char* name,
                                              const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Histogram>& Histograms(prometheus::Registry& r, const char* name,
                                                      const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

}  // namespace

NodeMetrics::NodeMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests(Counters(*registry_, "shoal_requests_total",
                        "Requests answered by the gateway, by function and HTTP status")),
      request_seconds(Histograms(*registry_, "shoal_request_duration_seconds",
                                 "Request latency at the gateway (headers in to response out)")),
      cold_starts(
          Counters(*registry_, "shoal_cold_starts_total", "Instances started (spawn to ready)")),
      cold_start_seconds(Histograms(*registry_, "shoal_cold_start_seconds",
                                    "Instance start time, spawn to ready")),
      instance_starts(Counters(*registry_, "shoal_instance_starts_total",
                               "Instances started, by function and path (zygote|spawn)")),
      instance_start_seconds(Histograms(*registry_, "shoal_instance_start_seconds",
                                        "Instance start to ready, by path (zygote|spawn)")),
      inflight(Gauges(*registry_, "shoal_inflight_requests", "Requests running in instances")),
      queued(Gauges(*registry_, "shoal_queued_requests",
                    "Requests waiting in the gateway for a free instance")),
      instances(Gauges(*registry_, "shoal_instances", "Function instances by state")),
      pool_bytes(Gauges(*registry_, "shoal_pool_bytes",
                        "Shared-memory pool bytes per tenant (state=used|free)")),
      pool_backend(Gauges(*registry_, "shoal_pool_backend",
                          "1 for the pool backend each tenant's pool runs on (backend=boost|dpdk, "
                          "reason=why it was chosen)")),
      dataplane_mode(Gauges(*registry_, "shoal_dataplane_mode",
                            "1 for the data plane that runs (mode=sockmap|unix)")),
      dataplane_events(Gauges(*registry_, "shoal_dataplane_events",
                              "Descriptors redirected by the sk_msg program, per function")),
      dataplane_bytes(Gauges(*registry_, "shoal_dataplane_payload_bytes",
                             "Payload bytes named by request descriptors, per function")),
      dataplane_inflight(Gauges(*registry_, "shoal_dataplane_inflight",
                                "Requests minus responses seen by the sk_msg program")),
      gateway_rejections(Counters(*registry_, "shoal_gateway_rejections_total",
                                  "Requests refused before dispatch, by reason")),
      forwards(Counters(
          *registry_, "shoal_forwards_total",
          "Requests forwarded to the node running their function (cluster mode), by function, node "
          "and result: ok, failed (no answer: 502 here), broken (the answer broke off midway)")),
      tokens_in_flight(Gauges(*registry_, "shoal_function_tokens_in_flight",
                              "Language models: prompt tokens to prefill and tokens still to "
                              "decode (max_tokens bounded by the context), over the instances")),
      sequences(Gauges(*registry_, "shoal_function_sequences",
                       "Language models: sequences by state (running, queued)")),
      autoscaler_desired(Gauges(*registry_, "shoal_autoscaler_desired_replicas",
                                "Instances the autoscaling policy wants (replicas + pre-warm)")),
      autoscaler_actual(
          Gauges(*registry_, "shoal_autoscaler_actual_replicas", "Instances starting or ready")),
      autoscaler_prewarm(Gauges(*registry_, "shoal_autoscaler_prewarm_replicas",
                                "Instances the policy keeps started ahead of demand")),
      autoscaler_prewarmed(Gauges(*registry_, "shoal_autoscaler_prewarmed_instances",
                                  "Pre-warmed instances that have not served a request yet")),
      autoscaler_keep_alive(Gauges(*registry_, "shoal_autoscaler_keep_alive_seconds",
                                   "How long an idle instance above the target stays")),
      autoscaler_target(Gauges(*registry_, "shoal_autoscaler_concurrency_target",
                               "Per-instance concurrency target of the latest decision")),
      autoscaler_panic(
          Gauges(*registry_, "shoal_autoscaler_panic", "1 while KPA is in panic mode")),
      autoscaler_decisions(
          Counters(*registry_, "shoal_autoscaler_decision_changes_total",
                   "Decisions that changed the desired replicas, pre-warm or keep-alive")),
      autoscaler_prewarm_starts(Counters(*registry_, "shoal_autoscaler_prewarm_starts_total",
                                         "Instances started ahead of demand")),
      autoscaler_cold_starts_avoided(
          Counters(*registry_, "shoal_autoscaler_cold_starts_avoided_total",
                   "Requests served by a pre-warmed instance as its first request")),
      autoscaler_cold_requests(Counters(*registry_, "shoal_cold_start_requests_total",
                                        "Requests that waited for an instance's cold start")),
      placement_decisions(Counters(
          *registry_, "shoal_placement_decisions_total",
          "Instance starts placed on this node, by kind (warm, cached, cold, unschedulable)")),
      fl_gpu_fallbacks(Counters(
          *registry_, "shoal_fl_gpu_fallbacks_total",
          "FL leaf aggregators whose GPU fold failed and that fold on the CPU since, by job")),
      fl_suspect_updates(Counters(*registry_, "shoal_fl_suspect_updates_total",
                                  "FL updates a job's robust rule (spec.aggregation.robust) "
                                  "excluded or down-weighted, by job, client and rule")) {}

std::string NodeMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

FunctionMetrics::FunctionMetrics(NodeMetrics& node, const std::string& function)
    : node_(node),
      function_(function),
      latency_(&node.request_seconds.Add({{"function", function}}, kLatencyBuckets)),
      cold_starts_(&node.cold_starts.Add({{"function", function}})),
      cold_start_seconds_(
          &node.cold_start_seconds.Add({{"function", function}}, kColdStartBuckets)) {}

FunctionMetrics::~FunctionMetrics() = default;  // series stay: counters must not go backwards

prometheus::Counter& FunctionMetrics::CounterFor(int status) {
  if (status < 0 || status >= static_cast<int>(by_status_.size())) status = 599;
  if (auto* c = by_status_[status].load(std::memory_order_acquire)) return *c;
  std::lock_guard lock(mu_);
  auto* c = &node_.requests.Add({{"function", function_}, {"code", std::to_string(status)}});
  by_status_[status].store(c, std::memory_order_release);
  return *c;
}

void FunctionMetrics::CountRequest(int status, double seconds) {
  CounterFor(status).Increment();
  latency_->Observe(seconds);
}

void NodeMetrics::CountInstanceStart(const std::string& function, const std::string& path,
                                     double seconds) {
  instance_starts.Add({{"function", function}, {"path", path}}).Increment();
  instance_start_seconds.Add({{"path", path}}, kColdStartBuckets).Observe(seconds);
}

void FunctionMetrics::CountColdStart(double seconds) {
  cold_starts_->Increment();
  cold_start_seconds_->Observe(seconds);
}

}  // namespace shoal
