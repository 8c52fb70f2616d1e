// Shoal's model-based policy. Each interval: forecast the arrival rate (Holt double exponential
// smoothing), size replicas as an M/M/c queue whose mean wait stays within a share of the SLO
// (Erlang C), pre-warm the instances a forecast rise needs before a cold start could deliver
// them, keep the largest recent size for a while (lazy scale-down), and when the function goes
// idle let its histogram of idle periods (gaps between active control intervals) decide how
// long the last instance stays, or release it and pre-warm the previous burst's size again
// just before the next period is expected.
#pragma once

#include <deque>
#include <optional>
#include <utility>

#include "shoal/control/autoscaler/keep_alive.h"
#include "shoal/control/autoscaler/scaling_policy.h"

namespace shoal {

// Per-call overrides of the sizing, for a policy that picks them every interval (learned).
struct SizingKnobs {
  double headroom = 1;             // the Erlang-C instance count is multiplied by this
  double scale_down_delay_s = -1;  // the lazy scale-down window; < 0: the params' own
};

class ShoalPolicy final : public ScalingPolicy {
 public:
  explicit ShoalPolicy(const ShoalParams& params);  // params must have passed Validate

  ScalingDecision Observe(const FunctionSignals& s) override { return Observe(s, SizingKnobs{}); }
  ScalingDecision Observe(const FunctionSignals& s, const SizingKnobs& knobs);
  const char* name() const override { return "shoal"; }

  // Instances needed for arrival rate `lambda` with service time `service_s`, `slots` requests
  // per instance and a mean-wait budget `max_wait_s` (M/M/(instances*slots)).
  uint32_t InstancesFor(double lambda, double service_s, uint32_t slots, double max_wait_s) const;

  double level() const { return level_; }  // arrivals per second
  double trend() const { return trend_; }  // arrivals per second, per second
  double Forecast(double horizon_s) const { return std::max(0.0, level_ + trend_ * horizon_s); }
  double service_estimate() const { return service_s_; }
  double cold_start_estimate() const { return cold_start_s_; }

 private:
  ShoalParams p_;
  HistogramKeepAlive keep_alive_;
  bool started_ = false;
  double last_now_ = 0;
  double level_ = 0;
  double trend_ = 0;
  double service_s_;
  double cold_start_s_;
  std::optional<double> last_activity_s_;
  uint32_t burst_peak_ = 0;       // largest demand of the current active period
  uint32_t last_burst_peak_ = 0;  // ... of the previous one: what a pre-warm brings back
  std::deque<std::pair<double, uint32_t>> recent_;  // (time, demand size) for lazy scale-down
};

}  // namespace shoal
