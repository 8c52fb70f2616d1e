// One node's autoscaling signals for one cluster function over its latest control interval
// (<prefix>/signals/<fn>/<node>, bound to the node's lease): what the node's instance manager
// measured, in the units of the autoscaler's FunctionSignals, which the leader sums over the
// nodes to decide the function's warm instances cluster-wide.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/common/status.h"

namespace shoal::cluster {

struct NodeSignals {
  int64_t unix_ms = 0;  // when the node measured it (stale ones are not summed)
  double interval_s = 0;
  uint32_t inflight = 0, queued = 0, ready = 0, starting = 0, busy = 0, idle = 0;
  uint64_t arrivals = 0, completions = 0;
  uint32_t cold_starts = 0;
  double mean_queue_wait_s = 0, mean_service_s = 0, p99_latency_s = 0, cold_start_cost_s = 0;
  // Language models (absent from an older node's record: 0).
  uint64_t tokens_in_flight = 0;
  uint32_t running_sequences = 0, queued_sequences = 0;

  std::string ToJson() const;
  static Result<NodeSignals> FromJson(const std::string& text);
};

}  // namespace shoal::cluster
