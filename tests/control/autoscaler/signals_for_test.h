// The FunctionSignals the policy tests feed: one control interval of a function, built from what
// a test varies; every other field keeps FunctionSignals' default.
#pragma once

#include <cstdint>

#include "shoal/control/autoscaler/signals.h"

namespace shoal::testing {

// The interval of `interval_s` that ends at `now_s`, for a function with per-instance limit
// `concurrency` and at most `max_scale` instances (0: unbounded).
inline FunctionSignals Interval(double now_s, double interval_s, uint32_t concurrency,
                                uint32_t max_scale) {
  FunctionSignals s;
  s.now_s = now_s;
  s.interval_s = interval_s;
  s.concurrency = concurrency;
  s.max_scale = max_scale;
  return s;
}

// `requests` arrived during `s` and as many finished, each taking `service_s`.
inline void Serve(FunctionSignals& s, uint64_t requests, double service_s) {
  s.arrivals = requests;
  s.completions = requests;
  s.mean_service_s = service_s;
}

}  // namespace shoal::testing
