#include "shoal/autoscaler/kpa_policy.h"

#include <algorithm>
#include <cmath>

namespace shoal {
namespace {

// ceil that ignores floating-point dust: 7 / 0.7 must give 10, not 11.
double CeilTolerant(double x) { return std::ceil(x - 1e-9); }

}  // namespace

KpaPolicy::KpaPolicy(const KpaParams& params)
    : p_(params), window_(params.bucket_s, params.stable_window_s) {}

double KpaPolicy::EffectiveTarget(uint32_t limit) const {
  const double t = target_override_ > 0 ? target_override_ : p_.target;
  if (t > 0) return limit > 0 ? std::min(t, static_cast<double>(limit)) : t;
  return limit > 0 ? static_cast<double>(limit) : p_.unlimited_target;
}

ScalingDecision KpaPolicy::Observe(const FunctionSignals& s) {
  // Observed concurrency: what is in flight and queued now. Requests much shorter than the
  // interval can finish between samples, so Little's law on the interval's arrivals bounds it
  // from below (the queue-proxy measures time-averaged concurrency for the same reason).
  double observed = static_cast<double>(s.inflight) + static_cast<double>(s.queued);
  if (s.interval_s > 0 && s.arrivals > 0 && s.mean_service_s > 0)
    observed =
        std::max(observed, static_cast<double>(s.arrivals) * s.mean_service_s / s.interval_s);
  window_.Record(s.now_s, observed);

  const double panic_window_s = p_.stable_window_s * p_.panic_window_percentage / 100;
  stable_avg_ = window_.Average(s.now_s, p_.stable_window_s);
  panic_avg_ = window_.Average(s.now_s, panic_window_s);

  const double target = EffectiveTarget(s.concurrency);
  const double target_value = target * p_.target_utilization;
  const double ready = std::max(1.0, static_cast<double>(s.ready));
  const double max_up = std::ceil(p_.max_scale_up_rate * ready);
  const double max_down = std::floor(ready / p_.max_scale_down_rate);

  const double dspc = CeilTolerant(stable_avg_ / target_value);
  const double dppc = CeilTolerant(panic_avg_ / target_value);
  auto desired_stable = static_cast<uint32_t>(std::min(std::max(dspc, max_down), max_up));
  auto desired_panic = static_cast<uint32_t>(std::min(std::max(dppc, max_down), max_up));
  if (p_.activation_scale > 1) {
    if (dspc > 0) desired_stable = std::max(desired_stable, p_.activation_scale);
    if (dppc > 0) desired_panic = std::max(desired_panic, p_.activation_scale);
  }

  // Panic: entered (or extended) whenever the panic-window demand is at least the threshold
  // times the ready instances; left once a whole stable window passed without that.
  const bool over_threshold = dppc / ready >= p_.panic_threshold_percentage / 100;
  if (over_threshold) {
    panic_since_ = s.now_s;
  } else if (panic_since_ && s.now_s > *panic_since_ + p_.stable_window_s) {
    panic_since_.reset();
    max_panic_pods_ = 0;
  }

  uint32_t desired = desired_stable;
  if (panic_since_) {
    desired = std::max(desired, desired_panic);
    max_panic_pods_ = std::max(max_panic_pods_, desired);  // never scale down in panic
    desired = max_panic_pods_;
  }

  // Scale to zero (the KPA reconciler's part): once the desired scale is 0, keep the last
  // instance for the grace period before letting it go.
  if (desired == 0) {
    if (!zero_since_) zero_since_ = s.now_s;
    const bool running = s.ready + s.starting > 0;
    if (!p_.enable_scale_to_zero ||
        (running && s.now_s - *zero_since_ < p_.scale_to_zero_grace_period_s))
      desired = running || !p_.enable_scale_to_zero ? 1 : 0;
  } else {
    zero_since_.reset();
  }

  ScalingDecision d;
  d.replicas = ClampScale(desired, s);
  d.concurrency_target = target;
  d.panic = panic_since_.has_value();
  return d;
}

}  // namespace shoal
