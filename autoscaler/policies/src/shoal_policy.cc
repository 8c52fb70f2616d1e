#include "shoal/autoscaler/shoal_policy.h"

#include <algorithm>
#include <cmath>

#include "shoal/autoscaler/queueing.h"

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

ScalingDecision ShoalPolicy::Observe(const FunctionSignals& s) {
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
  const bool active = s.arrivals > 0 || present > 0;
  if (s.arrivals > 0) keep_alive_.OnInvocations(s.now_s, s.arrivals);
  if (active) last_activity_s_ = s.now_s;

  // Demand now: the smoothed rate (never below this interval's), and never fewer instances
  // than the requests already here need.
  uint32_t demand = 0;
  if (active) {
    demand = InstancesFor(std::max(level_, observed_rate), service_s_, slots, max_wait);
    demand = std::max<uint32_t>(demand, static_cast<uint32_t>((present + slots - 1) / slots));
    demand = std::max<uint32_t>(demand, 1);
  }

  // Lazy scale-down: the largest demand of the last scale_down_delay_s.
  recent_.emplace_back(s.now_s, demand);
  while (!recent_.empty() && recent_.front().first < s.now_s - p_.scale_down_delay_s)
    recent_.pop_front();
  uint32_t replicas = 0;
  for (const auto& r : recent_) replicas = std::max(replicas, r.second);

  ScalingDecision d;
  d.concurrency_target = slots;
  d.replicas = ClampScale(replicas, s);

  // Pre-warm what the forecast needs by the time a cold start started now would be ready.
  if (active && trend_ > 0) {
    const uint32_t ahead = InstancesFor(Forecast(cold_start_s_ + dt), service_s_, slots, max_wait);
    if (ahead > d.replicas) d.prewarm = ahead - d.replicas;
  }

  // Idle: the histogram decides how long instances stay and when to bring one back.
  d.keep_alive_s = 0;  // 0: the platform's keep-alive applies
  if (p_.histogram_keep_alive) {
    const KeepAliveDecision ka = keep_alive_.Decide();
    if (ka.prewarm_after_s <= 0) {
      d.keep_alive_s = ka.keep_alive_s;
    } else {
      // The next invocation is not expected before prewarm_after_s: release idle instances
      // quickly and have one ready again for the window where it is expected.
      d.keep_alive_s = std::max(dt, 1.0);
      if (d.replicas == 0 && last_activity_s_) {
        const double idle = s.now_s - *last_activity_s_;
        if (idle >= ka.prewarm_after_s - cold_start_s_ &&
            idle < ka.prewarm_after_s + ka.keep_alive_s)
          d.prewarm = std::max<uint32_t>(d.prewarm, 1);
      }
    }
  }
  const uint64_t total = static_cast<uint64_t>(d.replicas) + d.prewarm;
  const uint32_t capped = ClampScale(total, s);
  d.prewarm = capped > d.replicas ? capped - d.replicas : 0;
  return d;
}

}  // namespace shoal
