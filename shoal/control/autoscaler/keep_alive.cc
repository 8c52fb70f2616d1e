#include "shoal/control/autoscaler/keep_alive.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace shoal {

HistogramKeepAlive::HistogramKeepAlive(const HistogramKeepAliveParams& p)
    : p_(p), bins_(static_cast<size_t>(std::ceil(p.range_s / p.bin_s - 1e-9)), 0) {}

void HistogramKeepAlive::OnInvocation(double now_s) { OnInvocations(now_s, 1); }

void HistogramKeepAlive::OnInvocations(double now_s, uint64_t count) {
  if (count == 0) return;
  if (last_) AddIdleTime(std::max(0.0, now_s - *last_));
  if (count > 1) {
    const double c = static_cast<double>(bins_[0]);
    const double k = static_cast<double>(count - 1);
    bin_sum_sq_ += (c + k) * (c + k) - c * c;
    bins_[0] += count - 1;
    in_bounds_ += count - 1;
  }
  last_ = now_s;
}

void HistogramKeepAlive::AddIdleTime(double idle_s) {
  if (idle_s >= p_.range_s) {
    ++out_of_bounds_;
    recent_oob_.push_back(idle_s);
    while (recent_oob_.size() > p_.oob_history) recent_oob_.pop_front();
    return;
  }
  const auto bin = static_cast<size_t>(std::max(0.0, std::floor(idle_s / p_.bin_s)));
  uint64_t& c = bins_[std::min(bin, bins_.size() - 1)];
  bin_sum_sq_ += 2.0 * static_cast<double>(c) + 1;
  ++c;
  ++in_bounds_;
  max_in_bounds_ = std::max(max_in_bounds_, idle_s);
}

double HistogramKeepAlive::BinCountCv() const {
  if (in_bounds_ == 0) return 0;
  const double n = static_cast<double>(bins_.size());
  const double mean = static_cast<double>(in_bounds_) / n;
  const double var = std::max(0.0, bin_sum_sq_ / n - mean * mean);
  return std::sqrt(var) / mean;
}

HistogramKeepAlive::Mode HistogramKeepAlive::mode() const {
  const uint64_t n = samples();
  if (n < p_.min_samples) return Mode::kFallback;
  // Mostly idle times beyond the histogram's range: the histogram cannot say when the next
  // invocation comes; the paper predicts it from the series of idle times instead.
  if (static_cast<double>(out_of_bounds_) / static_cast<double>(n) > p_.oob_fraction_threshold)
    return Mode::kOutOfBounds;
  // A flat histogram (low CV of the bin counts) carries no usable pattern.
  if (in_bounds_ < p_.min_samples || BinCountCv() < p_.cv_threshold) return Mode::kFallback;
  return Mode::kHistogram;
}

size_t HistogramKeepAlive::PercentileBin(double percentile) const {
  const double need = percentile / 100 * static_cast<double>(in_bounds_);
  uint64_t cum = 0;
  for (size_t i = 0; i < bins_.size(); ++i) {
    cum += bins_[i];
    if (static_cast<double>(cum) >= need && cum > 0) return i;
  }
  return bins_.size() - 1;
}

KeepAliveDecision HistogramKeepAlive::Decide() const {
  switch (mode()) {
    case Mode::kFallback:
      if (p_.cover_observed_idle && samples() < p_.min_samples && max_in_bounds_ > 0) {
        return {0, std::max(p_.fallback.keep_alive_s,
                            std::min(p_.range_s, max_in_bounds_ * (1 + p_.margin)))};
      }
      return {0, p_.fallback.keep_alive_s};
    case Mode::kOutOfBounds: {
      // Prediction: the mean of the latest out-of-bounds idle times (the paper fits ARIMA to
      // them; with idle times of hours a mean of the last few is what such a fit tracks).
      const double predicted = std::accumulate(recent_oob_.begin(), recent_oob_.end(), 0.0) /
                               static_cast<double>(recent_oob_.size());
      return {predicted * (1 - p_.oob_margin), 2 * p_.oob_margin * predicted};
    }
    case Mode::kHistogram:
      break;
  }
  // Pre-warm at the head bin's lower edge shortened by the margin; keep alive until the tail
  // bin's upper edge lengthened by the margin.
  const double head = static_cast<double>(PercentileBin(p_.head_percentile)) * p_.bin_s;
  const double tail = static_cast<double>(PercentileBin(p_.tail_percentile) + 1) * p_.bin_s;
  const double prewarm = head * (1 - p_.margin);
  return {prewarm, tail * (1 + p_.margin) - prewarm};
}

Result<std::unique_ptr<KeepAlivePolicy>> MakeKeepAlivePolicy(const std::string& name,
                                                             const KeepAliveParams& params) {
  if (name == "fixed") return MakeValidated<KeepAlivePolicy, FixedKeepAlive>(params.fixed);
  if (name == "histogram") {
    return MakeValidated<KeepAlivePolicy, HistogramKeepAlive>(params.histogram);
  }
  return InvalidArgument("unknown keep-alive policy '" + name + "' (known: fixed, histogram)");
}

}  // namespace shoal
