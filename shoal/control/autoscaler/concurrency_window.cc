#include "shoal/control/autoscaler/concurrency_window.h"

#include <algorithm>
#include <cmath>

namespace shoal {

ConcurrencyWindow::ConcurrencyWindow(double bucket_s, double retention_s)
    : bucket_s_(bucket_s),
      retention_buckets_(static_cast<int64_t>(std::ceil(retention_s / bucket_s - 1e-9)) + 1) {}

int64_t ConcurrencyWindow::IndexOf(double t) const {
  // The tiny epsilon keeps t = 3.0 in bucket 3 despite representation error (2.9999999).
  return static_cast<int64_t>(std::floor(t / bucket_s_ + 1e-9));
}

void ConcurrencyWindow::Record(double now_s, double value) {
  const int64_t idx = IndexOf(now_s);
  if (!buckets_.empty() && idx < buckets_.back().index) return;  // time went backwards
  if (!buckets_.empty() && idx > buckets_.back().index) {
    // Backfill the buckets this sample covers; beyond the retention they would be dropped.
    int64_t from = buckets_.back().index + 1;
    if (idx - from > retention_buckets_) {
      buckets_.clear();
      from = idx - retention_buckets_;
    }
    for (int64_t i = from; i < idx; ++i) buckets_.push_back({i, value, 1});
  }
  if (buckets_.empty() || buckets_.back().index != idx) buckets_.push_back({idx, 0, 0});
  buckets_.back().sum += value;
  buckets_.back().count += 1;
  while (!buckets_.empty() && buckets_.front().index <= idx - retention_buckets_)
    buckets_.pop_front();
}

double ConcurrencyWindow::Average(double now_s, double window_s) const {
  const int64_t now_idx = IndexOf(now_s);
  const int64_t n =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(window_s / bucket_s_ - 1e-9)));
  const int64_t first = now_idx - n + 1;
  double sum = 0;
  int64_t valid = 0;
  for (const Bucket& b : buckets_) {
    if (b.index < first || b.index > now_idx) continue;
    sum += b.sum / b.count;
    ++valid;
  }
  if (valid == 0) return 0;
  // Buckets after the last sample up to now count as zero (nothing was reported).
  if (!buckets_.empty() && buckets_.back().index < now_idx && buckets_.back().index >= first)
    valid += now_idx - buckets_.back().index;
  return sum / static_cast<double>(valid);
}

}  // namespace shoal
