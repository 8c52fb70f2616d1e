#include "shoal/control/autoscaler/shoal_policy.h"

#include <algorithm>
#include <cmath>

#include "shoal/control/autoscaler/queueing.h"

namespace shoal {

ShoalPolicy::ShoalPolicy(const ShoalParams& params)
    : p_(params),
      keep_alive_(params.keep_alive),
      service_s_(params.default_service_s),
      cold_start_s_(params.default_cold_start_s) {}

uint32_t ShoalPolicy::InstancesFor(double lambda, double service_s, uint32_t slots,
                                   double max_wait_s) const {
  if (lambda <= 0) return 0;
  const uint32_t servers = MinServersForMeanWait(lambda, service_s, max_wait_s, p_.max_utilization);
  return (servers + slots - 1) / slots;
}

ScalingDecision ShoalPolicy::Observe(const FunctionSignals& s, const SizingKnobs& knobs) {
  double dt = s.interval_s;
  if (!(dt > 0)) dt = started_ ? s.now_s - last_now_ : 0;
  const double observed_rate = dt > 0 ? static_cast<double>(s.arrivals) / dt : 0;

  // Holt's linear smoothing over the per-interval arrival rate.
  if (!started_) {
    level_ = observed_rate;
    trend_ = 0;
  } else if (dt > 0) {
    const double prev = level_;
    level_ = p_.level_smoothing * observed_rate +
             (1 - p_.level_smoothing) * std::max(0.0, level_ + trend_ * dt);
    trend_ = p_.trend_smoothing * (level_ - prev) / dt + (1 - p_.trend_smoothing) * trend_;
  }
  started_ = true;
  last_now_ = s.now_s;
  if (s.completions > 0 && s.mean_service_s > 0)
    service_s_ += p_.service_smoothing * (s.mean_service_s - service_s_);
  if (s.cold_start_cost_s > 0)
    cold_start_s_ = s.cold_starts > 0 ? cold_start_s_ + 0.5 * (s.cold_start_cost_s - cold_start_s_)
                                      : std::max(cold_start_s_, s.cold_start_cost_s);

  const uint32_t slots = std::max<uint32_t>(1, s.concurrency);
  const double max_wait =
      s.slo_s > 0 ? p_.wait_budget_fraction * s.slo_s : p_.default_wait_budget_s;
  const uint64_t present = static_cast<uint64_t>(s.inflight) + s.queued;
  const bool active = s.arrivals > 0 || present > 0 || s.tokens_in_flight > 0;
  // Idle periods, not request gaps: a burst of many requests is one invocation of the
  // function's pattern, and what matters for keep-alive is how long nothing happens.
  if (active && last_activity_s_ && s.now_s - *last_activity_s_ > dt + 1e-9) {
    keep_alive_.AddIdleTime(s.now_s - *last_activity_s_);
  }

  // Demand now: the smoothed rate (never below this interval's), and never fewer instances
  // than the requests already here need.
  uint32_t demand = 0;
  if (active) {
    demand = InstancesFor(std::max(level_, observed_rate), service_s_, slots, max_wait);
    if (knobs.headroom != 1) {
      demand = static_cast<uint32_t>(std::ceil(knobs.headroom * demand - 1e-9));
    }
    demand = std::max<uint32_t>(demand, static_cast<uint32_t>((present + slots - 1) / slots));
    if (p_.token_target > 0) {
      // Language models: the tokens in flight need this many instances at the utilisation cap.
      const double by_tokens =
          static_cast<double>(s.tokens_in_flight) / (p_.token_target * p_.max_utilization);
      demand = std::max<uint32_t>(demand, static_cast<uint32_t>(std::ceil(by_tokens - 1e-9)));
    }
    demand = std::max<uint32_t>(demand, 1);
    if (!last_activity_s_ || s.now_s - *last_activity_s_ > dt + 1e-9) burst_peak_ = 0;
    burst_peak_ = std::max(burst_peak_, demand);
    last_burst_peak_ = burst_peak_;
    last_activity_s_ = s.now_s;
  }

  // Lazy scale-down: the largest demand of the last scale_down_delay_s.
  const double delay =
      knobs.scale_down_delay_s >= 0 ? knobs.scale_down_delay_s : p_.scale_down_delay_s;
  recent_.emplace_back(s.now_s, demand);
  while (!recent_.empty() && recent_.front().first < s.now_s - delay) recent_.pop_front();
  uint32_t replicas = 0;
  for (const auto& r : recent_) replicas = std::max(replicas, r.second);

  ScalingDecision d;
  d.concurrency_target = slots;

  // Pre-warm what the forecast needs by the time a cold start started now would be ready.
  if (active && trend_ > 0) {
    const uint32_t ahead = InstancesFor(Forecast(cold_start_s_ + dt), service_s_, slots, max_wait);
    if (ahead > replicas) d.prewarm = ahead - replicas;
  }

  // Excess instances (above the lazy size) stay the platform's fixed window.
  d.keep_alive_s = p_.keep_alive.fallback.keep_alive_s;
  if (p_.histogram_keep_alive && !active && last_activity_s_) {
    const double idle = s.now_s - *last_activity_s_;
    const KeepAliveDecision ka = keep_alive_.Decide();
    const bool learned = keep_alive_.mode() != HistogramKeepAlive::Mode::kFallback;
    // Release only for gaps longer than the lazy scale-down window: a function whose quiet
    // spells are shorter than that is bursty, not periodic, and keeps its instance.
    if (learned && ka.prewarm_after_s > std::max(p_.scale_down_delay_s, dt)) {
      // The next period is not expected before prewarm_after_s: release everything now and
      // have the last burst's size ready again for the window where it is expected.
      replicas = 0;
      d.keep_alive_s = std::max(dt, 1.0);
      if (idle + dt >= ka.prewarm_after_s - 2 * cold_start_s_ &&
          idle < ka.prewarm_after_s + ka.keep_alive_s)
        d.prewarm = std::max<uint32_t>(d.prewarm, std::max<uint32_t>(1, last_burst_peak_));
    } else {
      // Keep the last instance for the window the history supports: the histogram's tail, the
      // longest idle period seen while it is learning, or KPA's span before any is seen.
      // A learned tail never shortens it below the first-idle window: for functions called
      // at random (Poisson-like) the histogram's 99th percentile is a risky cut-off, and an
      // idle instance for a minute and a half costs less than the cold starts past it.
      const double window = keep_alive_.samples() == 0
                                ? p_.first_idle_window_s
                                : std::max(ka.keep_alive_s, learned ? p_.first_idle_window_s : 0);
      if (idle < window) replicas = std::max<uint32_t>(replicas, 1);
      if (learned) d.keep_alive_s = ka.keep_alive_s;
    }
  }
  d.replicas = ClampScale(replicas, s);
  const uint64_t total = static_cast<uint64_t>(d.replicas) + d.prewarm;
  const uint32_t capped = ClampScale(total, s);
  d.prewarm = capped > d.replicas ? capped - d.replicas : 0;
  return d;
}

}  // namespace shoal
