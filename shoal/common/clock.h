// The monotonic clock in nanoseconds (descriptor timestamps, latencies and timeouts) and the
// wall clock in Unix milliseconds (what records keep: created, updated, measured at).
#pragma once

#include <time.h>

#include <cstdint>

namespace shoal {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline int64_t UnixMs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000 + int64_t(ts.tv_nsec) / 1000000;
}

}  // namespace shoal
