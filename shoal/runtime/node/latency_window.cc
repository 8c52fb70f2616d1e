#include "shoal/runtime/node/latency_window.h"

#include <cmath>

namespace shoal {

int LatencyWindow::BucketOf(double micros) {
  if (micros <= 1.0) return 0;
  const int b = static_cast<int>(std::ceil(4.0 * std::log2(micros)));
  return b >= kBuckets ? kBuckets - 1 : b;
}

double LatencyWindow::BucketUpperMicros(int bucket) { return std::exp2(bucket / 4.0); }

void LatencyWindow::Record(uint64_t now_s, double micros) {
  Second& s = ring_[now_s % kSeconds];
  uint64_t epoch = s.epoch.load(std::memory_order_acquire);
  if (epoch != now_s && s.epoch.compare_exchange_strong(epoch, now_s)) {
    for (auto& b : s.buckets) b.store(0, std::memory_order_relaxed);
  }
  s.buckets[BucketOf(micros)].fetch_add(1, std::memory_order_relaxed);
}

LatencyWindow::Summary LatencyWindow::Summarize(uint64_t now_s) const {
  std::array<uint64_t, kBuckets> merged{};
  Summary out;
  for (const Second& s : ring_) {
    const uint64_t epoch = s.epoch.load(std::memory_order_acquire);
    if (epoch == 0 || epoch + kSeconds <= now_s || epoch > now_s) continue;
    for (int i = 0; i < kBuckets; ++i) {
      const uint32_t n = s.buckets[i].load(std::memory_order_relaxed);
      merged[i] += n;
      out.count += n;
    }
  }
  out.rps = static_cast<double>(out.count) / kSeconds;
  if (out.count == 0) return out;
  auto quantile = [&](double q) {
    const auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(out.count)));
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += merged[i];
      if (seen >= rank) return BucketUpperMicros(i) / 1000.0;
    }
    return BucketUpperMicros(kBuckets - 1) / 1000.0;
  };
  out.p50_ms = quantile(0.50);
  out.p99_ms = quantile(0.99);
  return out;
}

}  // namespace shoal
