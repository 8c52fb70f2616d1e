// The monotonic clock in nanoseconds: descriptor timestamps, latencies and timeouts.
#pragma once

#include <time.h>

#include <cstdint>

namespace shoal {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace shoal
