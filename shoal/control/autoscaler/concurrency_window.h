// Time-bucketed sliding-window average of a sampled level (observed concurrency), as Knative's
// autoscaler keeps per-second buckets. A sample at time t stands for the interval since the
// previous sample, so observations at irregular intervals weigh by the time they cover.
#pragma once

#include <cstdint>
#include <deque>

namespace shoal {

class ConcurrencyWindow {
 public:
  // `bucket_s`: bucket width; `retention_s`: the longest window Average() will be asked for.
  ConcurrencyWindow(double bucket_s, double retention_s);

  void Record(double now_s, double value);
  // Mean of the bucket values over the last `window_s` ending at `now_s`, over the buckets
  // since the first sample (a young window averages what it has); 0 with no sample in it.
  double Average(double now_s, double window_s) const;

 private:
  struct Bucket {
    int64_t index;
    double sum;
    uint32_t count;
  };
  int64_t IndexOf(double t) const;

  double bucket_s_;
  int64_t retention_buckets_;
  std::deque<Bucket> buckets_;  // consecutive indices, oldest first
};

}  // namespace shoal
