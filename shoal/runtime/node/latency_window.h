// Request latencies of the last ten seconds, for `shoal top`'s p50/p99: a log-scale histogram
// per second in a ring of ten, updated with relaxed atomics from every gateway loop.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace shoal {

class LatencyWindow {
 public:
  static constexpr int kSeconds = 10;
  static constexpr int kBuckets = 128;  // 4 per octave from 1 µs: 1 µs .. ~4.3 ks

  void Record(uint64_t now_s, double micros);
  struct Summary {
    uint64_t count = 0;
    double rps = 0;
    double p50_ms = 0;
    double p99_ms = 0;
  };
  Summary Summarize(uint64_t now_s) const;

  static int BucketOf(double micros);
  static double BucketUpperMicros(int bucket);

 private:
  struct Second {
    std::atomic<uint64_t> epoch{0};
    std::array<std::atomic<uint32_t>, kBuckets> buckets{};
  };
  std::array<Second, kSeconds> ring_{};
};

}  // namespace shoal
