#include "shoal/runtime/node_metrics.h"

#include <prometheus/text_serializer.h>

namespace shoal {

namespace {
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
const prometheus::Histogram::BucketBoundaries kColdStartBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}  // namespace

NodeMetrics::NodeMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests(prometheus::BuildCounter()
                   .Name("shoal_requests_total")
                   .Help("Requests answered by the gateway, by function and HTTP status")
                   .Register(*registry_)),
      request_seconds(prometheus::BuildHistogram()
                          .Name("shoal_request_duration_seconds")
                          .Help("Request latency at the gateway (headers in to response out)")
                          .Register(*registry_)),
      cold_starts(prometheus::BuildCounter()
                      .Name("shoal_cold_starts_total")
                      .Help("Instances started (spawn to ready)")
                      .Register(*registry_)),
      cold_start_seconds(prometheus::BuildHistogram()
                             .Name("shoal_cold_start_seconds")
                             .Help("Instance start time, spawn to ready")
                             .Register(*registry_)),
      instance_starts(prometheus::BuildCounter()
                          .Name("shoal_instance_starts_total")
                          .Help("Instances started, by function and path (zygote|spawn)")
                          .Register(*registry_)),
      instance_start_seconds(prometheus::BuildHistogram()
                                 .Name("shoal_instance_start_seconds")
                                 .Help("Instance start to ready, by path (zygote|spawn)")
                                 .Register(*registry_)),
      inflight(prometheus::BuildGauge()
                   .Name("shoal_inflight_requests")
                   .Help("Requests running in instances")
                   .Register(*registry_)),
      queued(prometheus::BuildGauge()
                 .Name("shoal_queued_requests")
                 .Help("Requests waiting in the gateway for a free instance")
                 .Register(*registry_)),
      instances(prometheus::BuildGauge()
                    .Name("shoal_instances")
                    .Help("Function instances by state")
                    .Register(*registry_)),
      pool_bytes(prometheus::BuildGauge()
                     .Name("shoal_pool_bytes")
                     .Help("Shared-memory pool bytes per tenant (state=used|free)")
                     .Register(*registry_)),
      pool_backend(prometheus::BuildGauge()
                       .Name("shoal_pool_backend")
                       .Help("1 for the pool backend each tenant's pool runs on (backend=boost|dpdk, "
                             "reason=why it was chosen)")
                       .Register(*registry_)),
      dataplane_mode(prometheus::BuildGauge()
                         .Name("shoal_dataplane_mode")
                         .Help("1 for the data plane that runs (mode=sockmap|unix)")
                         .Register(*registry_)),
      dataplane_events(prometheus::BuildGauge()
                           .Name("shoal_dataplane_events")
                           .Help("Descriptors redirected by the sk_msg program, per function")
                           .Register(*registry_)),
      dataplane_bytes(prometheus::BuildGauge()
                          .Name("shoal_dataplane_payload_bytes")
                          .Help("Payload bytes named by request descriptors, per function")
                          .Register(*registry_)),
      dataplane_inflight(prometheus::BuildGauge()
                             .Name("shoal_dataplane_inflight")
                             .Help("Requests minus responses seen by the sk_msg program")
                             .Register(*registry_)),
      gateway_rejections(prometheus::BuildCounter()
                             .Name("shoal_gateway_rejections_total")
                             .Help("Requests refused before dispatch, by reason")
                             .Register(*registry_)),
      forwards(prometheus::BuildCounter()
                   .Name("shoal_forwards_total")
                   .Help("Requests forwarded to the node running their function (cluster mode), "
                         "by function, node and result: ok, failed (no answer: 502 here), "
                         "broken (the answer broke off midway)")
                   .Register(*registry_)),
      autoscaler_desired(prometheus::BuildGauge()
          .Name("shoal_autoscaler_desired_replicas")
          .Help("Instances the autoscaling policy wants (replicas + pre-warm)")
          .Register(*registry_)),
      autoscaler_actual(prometheus::BuildGauge()
          .Name("shoal_autoscaler_actual_replicas")
          .Help("Instances starting or ready")
          .Register(*registry_)),
      autoscaler_prewarm(prometheus::BuildGauge()
          .Name("shoal_autoscaler_prewarm_replicas")
          .Help("Instances the policy keeps started ahead of demand")
          .Register(*registry_)),
      autoscaler_prewarmed(prometheus::BuildGauge()
          .Name("shoal_autoscaler_prewarmed_instances")
          .Help("Pre-warmed instances that have not served a request yet")
          .Register(*registry_)),
      autoscaler_keep_alive(prometheus::BuildGauge()
          .Name("shoal_autoscaler_keep_alive_seconds")
          .Help("How long an idle instance above the target stays")
          .Register(*registry_)),
      autoscaler_target(prometheus::BuildGauge()
          .Name("shoal_autoscaler_concurrency_target")
          .Help("Per-instance concurrency target of the latest decision")
          .Register(*registry_)),
      autoscaler_panic(prometheus::BuildGauge()
          .Name("shoal_autoscaler_panic")
          .Help("1 while KPA is in panic mode")
          .Register(*registry_)),
      autoscaler_decisions(prometheus::BuildCounter()
          .Name("shoal_autoscaler_decision_changes_total")
          .Help("Decisions that changed the desired replicas, pre-warm or keep-alive")
          .Register(*registry_)),
      autoscaler_prewarm_starts(prometheus::BuildCounter()
          .Name("shoal_autoscaler_prewarm_starts_total")
          .Help("Instances started ahead of demand")
          .Register(*registry_)),
      autoscaler_cold_starts_avoided(prometheus::BuildCounter()
          .Name("shoal_autoscaler_cold_starts_avoided_total")
          .Help("Requests served by a pre-warmed instance as its first request")
          .Register(*registry_)),
      autoscaler_cold_requests(prometheus::BuildCounter()
          .Name("shoal_cold_start_requests_total")
          .Help("Requests that waited for an instance's cold start")
          .Register(*registry_)),
      placement_decisions(prometheus::BuildCounter()
          .Name("shoal_placement_decisions_total")
          .Help("Instance starts placed on this node, by kind (warm, cached, cold, unschedulable)")
          .Register(*registry_)),
      fl_gpu_fallbacks(prometheus::BuildCounter()
          .Name("shoal_fl_gpu_fallbacks_total")
          .Help("FL leaf aggregators whose GPU fold failed and that fold on the CPU since, by job")
          .Register(*registry_)),
      fl_suspect_updates(prometheus::BuildCounter()
          .Name("shoal_fl_suspect_updates_total")
          .Help("FL updates a job's robust rule (spec.aggregation.robust) excluded or "
                "down-weighted, by job, client and rule")
          .Register(*registry_)) {}


std::string NodeMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

FunctionMetrics::FunctionMetrics(NodeMetrics& node, const std::string& function)
    : node_(node),
      function_(function),
      latency_(&node.request_seconds.Add({{"function", function}}, kLatencyBuckets)),
      cold_starts_(&node.cold_starts.Add({{"function", function}})),
      cold_start_seconds_(&node.cold_start_seconds.Add({{"function", function}}, kColdStartBuckets)) {}

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
