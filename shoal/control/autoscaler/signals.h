// What an autoscaling policy sees of one function every control interval, and what it decides.
// One struct, filled by shoald's instance manager live and by the simulator offline, so the
// same policy code runs in both.
#pragma once

#include <cstdint>
#include <string>

namespace shoal {

struct FunctionSignals {
  std::string function;
  double now_s = 0;              // time of this observation (seconds, monotonic)
  double interval_s = 0;         // since the previous observation
  uint32_t inflight = 0;         // requests running in instances now
  uint32_t queued = 0;           // requests waiting for a free instance now
  uint64_t arrivals = 0;         // requests that arrived during the interval
  uint64_t completions = 0;      // requests that finished during the interval
  double mean_queue_wait_s = 0;  // of the requests dispatched during the interval
  double mean_service_s = 0;     // handler time of the requests finished during the interval
  double p99_latency_s = 0;      // end-to-end, finished during the interval
  uint32_t cold_starts = 0;      // instances that became ready during the interval
  double cold_start_cost_s = 0;  // mean spawn-to-ready time of those (or the node's estimate)
  uint32_t ready = 0;            // instances taking requests
  uint32_t starting = 0;
  uint32_t busy = 0;         // ready instances with at least one request in flight
  uint32_t idle = 0;         // ready instances with none
  uint32_t concurrency = 1;  // the function's per-instance concurrency limit (manifest)
  uint32_t min_scale = 0;
  uint32_t max_scale = 1;
  double slo_s = 0;  // latency objective (0 = none given)
  // Language models (their instances' load reports, shoal/common/load_report.h): prompt tokens
  // to prefill + tokens still to decode (each sequence's max_tokens bounded by the context), and
  // sequences running and queued in the engines. 0 for other functions.
  uint64_t tokens_in_flight = 0;
  uint32_t running_sequences = 0;
  uint32_t queued_sequences = 0;
  // Outcomes of the interval that training charges to the sizing in force: the simulator fills
  // both; shoald leaves them 0 (the sizing table does not learn online).
  uint32_t cold_requests = 0;  // requests dispatched during the interval after a cold start
  uint32_t slo_misses = 0;     // requests finished during the interval over slo_s
};

struct ScalingDecision {
  uint32_t replicas = 0;          // desired instances (ready + starting), within min..max
  double concurrency_target = 0;  // per-instance target the decision was based on
  uint32_t prewarm = 0;           // extra idle instances to keep started ahead of demand
  double keep_alive_s = 0;        // how long an idle instance above min stays
  bool panic = false;             // KPA panic mode (for logs and metrics)
};

}  // namespace shoal
