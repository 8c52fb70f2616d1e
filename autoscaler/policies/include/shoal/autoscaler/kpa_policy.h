// Knative's Pod Autoscaler (KPA): concurrency averaged over a 60 s stable and a 6 s panic
// window, desired = ceil(average / (target * utilisation)), panic mode on bursts (never scales
// down while panicking), rate limits, and scale to zero after a grace period.
#pragma once

#include <optional>

#include "shoal/autoscaler/concurrency_window.h"
#include "shoal/autoscaler/scaling_policy.h"

namespace shoal {

class KpaPolicy final : public ScalingPolicy {
 public:
  explicit KpaPolicy(const KpaParams& params);  // params must have passed Validate

  ScalingDecision Observe(const FunctionSignals& s) override;
  const char* name() const override { return "kpa"; }

  // RL-Q moves the target between observations; 0 restores the params' rule.
  void set_target_override(double target) { target_override_ = target; }
  // Per-instance concurrency target (before utilisation) for a function with this limit.
  double EffectiveTarget(uint32_t concurrency_limit) const;
  bool in_panic() const { return panic_since_.has_value(); }
  double stable_average() const { return stable_avg_; }
  double panic_average() const { return panic_avg_; }

 private:
  KpaParams p_;
  ConcurrencyWindow window_;
  double target_override_ = 0;
  std::optional<double> panic_since_;  // last time the panic condition held
  uint32_t max_panic_pods_ = 0;
  std::optional<double> zero_since_;  // when the desired scale first dropped to 0
  double stable_avg_ = 0;
  double panic_avg_ = 0;
};

}  // namespace shoal
