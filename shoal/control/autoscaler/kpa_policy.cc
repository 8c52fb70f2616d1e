#include "shoal/control/autoscaler/kpa_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace shoal {
namespace {

// ceil that ignores floating-point dust: 7 / 0.7 must give 10, not 11.
double CeilTolerant(double x) { return std::ceil(x - 1e-9); }

}  // namespace

KpaPolicy::KpaPolicy(const KpaParams& params)
    : p_(params), window_(params.bucket_s, params.stable_window_s) {}

double KpaPolicy::EffectiveTarget(uint32_t limit) const {
  if (p_.tokens_metric) return p_.target;  // tokens per instance: no concurrency bound
  const double t = target_override_ > 0 ? target_override_ : p_.target;
  if (t > 0) return limit > 0 ? std::min(t, static_cast<double>(limit)) : t;
  return limit > 0 ? static_cast<double>(limit) : p_.unlimited_target;
}

ScalingDecision KpaPolicy::Observe(const FunctionSignals& s) {
  // Observed concurrency: what is in flight and queued now. Requests much shorter than the
  // interval can finish between samples, so Little's law on the interval's arrivals bounds it
  // from below (the queue-proxy measures time-averaged concurrency for the same reason).
  double observed = static_cast<double>(s.inflight) + static_cast<double>(s.queued);
  if (p_.tokens_metric) {
    // Tokens in flight are what the engines report now (queued sequences' prompts included).
    observed = static_cast<double>(s.tokens_in_flight);
  } else if (s.interval_s > 0 && s.arrivals > 0 && s.mean_service_s > 0)
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

  // The KPA reconciler's part (scaler.go scale(): bounds, then handleScaleToZero).
  if (!started_) {
    started_ = true;
    active_ = Active::kFalse;  // the SKS is created in proxy mode, the PA inactive
    active_change_s_ = s.now_s;
    proxy_since_ = s.now_s;
    applied_ = s.ready + s.starting;
  }
  // The scale the reconciler reports (its "want"; -1: unknown) and the scale it applies.
  int64_t want = ClampScale(desired, s);
  uint32_t apply = static_cast<uint32_t>(want);
  if (want == 0) {
    const ZeroStep z = ScaleToZero(s);
    apply = z.apply;
    want = z.want;
  }
  applied_ = apply;

  // computeActiveCondition (kpa.go's table): want 0 -> inactive; enough ready (min scale, at
  // least 1) -> active when wanted or not inactive; too few -> activating likewise. An unknown
  // want (-1) keeps an inactive PA inactive and moves the others by what is ready, so a
  // function that was activating when its decision fell to 0 goes active once an instance is
  // ready, and from there to zero after a stable window.
  const double min_ready = std::max<uint32_t>(1, s.min_scale);
  if (want == 0) {
    Mark(Active::kFalse, s.now_s);
  } else if (want > 0 || active_ != Active::kFalse) {
    Mark(s.ready >= min_ready ? Active::kTrue : Active::kUnknown, s.now_s);
  }
  // ReconcileKind: the activator leaves the path only with want > 0 and spare burst capacity.
  const double total = target;
  double ebc = -1;
  if (p_.target_burst_capacity == 0) ebc = 0;
  if (p_.target_burst_capacity > 0)
    ebc = std::floor(s.ready * total - p_.target_burst_capacity - panic_avg_);
  if (want > 0 && ebc >= 0) {
    proxy_since_.reset();
  } else if (!proxy_since_) {
    proxy_since_ = s.now_s;
  }

  ScalingDecision d;
  d.replicas = apply;
  d.concurrency_target = target;
  d.panic = panic_since_.has_value();
  return d;
}

void KpaPolicy::Mark(Active a, double now_s) {
  if (a == active_) return;
  active_ = a;
  active_change_s_ = now_s;
}

KpaPolicy::ZeroStep KpaPolicy::ScaleToZero(const FunctionSignals& s) {
  // Keeping one (scale to zero disabled, or active for less than a stable window) is applied
  // and reported as 1; a held or applied 0 reports 0 (the PA inactive, the activator in path).
  if (!p_.enable_scale_to_zero) return {1, 1};
  if (active_ == Active::kTrue) {
    // Active for a whole stable window: mark inactive (below) and reconcile again at once
    // (the status update does that), else keep one until the window has passed.
    if (s.now_s - active_change_s_ < p_.stable_window_s) return {1, 1};
    Mark(Active::kFalse, s.now_s);
    if (!proxy_since_) proxy_since_ = s.now_s;  // want 0 puts the activator in the path
  }
  const uint32_t hold = applied_;  // a decision not applied leaves the scale where it was
  if (active_ == Active::kUnknown) {
    // Activating: held, unless activation has failed for the activation timeout.
    if (s.now_s - active_change_s_ >= p_.activation_timeout_s) return {0, 0};
    return {hold, -1};
  }
  const double inactive_for = s.now_s - active_change_s_;
  const double retention = p_.scale_to_zero_pod_retention_s;
  if (inactive_for >= std::max(p_.scale_to_zero_grace_period_s, retention)) return {0, 0};
  if (retention > 0 && inactive_for < retention) return {hold, 0};
  const double proxy_for = proxy_since_ ? s.now_s - *proxy_since_ : 0;
  if (p_.scale_to_zero_grace_period_s - proxy_for <= 0) return {0, 0};  // the "fast path"
  return {hold, 0};
}

}  // namespace shoal
