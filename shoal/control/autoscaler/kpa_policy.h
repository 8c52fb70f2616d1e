// Knative's Pod Autoscaler (KPA): concurrency averaged over a 60 s stable and a 6 s panic
// window, desired = ceil(average / (target * utilisation)), panic mode on bursts (never scales
// down while panicking), rate limits, and scale to zero as Knative's KPA reconciler does it:
// the last instance goes once the activator has been in the request path for the grace period
// (at once when it already was), not a fixed grace period after every decision to go to zero.
//
// Followed from knative/serving (commit 98e5ef90aa70):
//   pkg/autoscaler/scaling/autoscaler.go, (*autoscaler).Scale, lines 184-292: max scale
//     up/down rates, dspc/dppc, activation scale, panic enter/extend/leave, maxPanicPods, and the
//     excess burst capacity floor(ready * total - targetBurstCapacity - panic average).
//   pkg/reconciler/autoscaling/kpa/kpa.go, ReconcileKind, lines 128-142: the activator is in
//     the path (SKS proxy mode) unless want > 0 and excess burst capacity >= 0;
//     computeActiveCondition, lines 286-300: its table (want 0 -> inactive; otherwise active
//     or activating by whether min(1, min scale) are ready, an unknown want leaving an
//     inactive PA inactive).
//   pkg/reconciler/autoscaling/kpa/scaler.go, handleScaleToZero, lines 174-299: active for at
//     least the stable window -> mark inactive without applying 0 (else hold 1); inactive for
//     max(grace, retention) -> 0; else hold while inactive < retention; else 0 once the SKS has
//     proxied for the grace period ("fast path"), hold otherwise; activating -> hold with an
//     unknown want until the activation timeout (progress deadline 600 s + 30 s), then 0. scale(),
//     lines 356-364: min/max bounds come before it, and a held scale is not applied.
//   config/core/configmaps/autoscaler.yaml: the defaults in KpaParams (grace 30 s is "the upper
//     limit ... might actually be 0", pod retention 0 s, target-burst-capacity 211).
#pragma once

#include <cstdint>
#include <optional>

#include "shoal/control/autoscaler/concurrency_window.h"
#include "shoal/control/autoscaler/scaling_policy.h"

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
  // handleScaleToZero for a decider that says 0: the scale to apply now, and the scale the
  // reconciler then reports as wanted (which decides the PA's state and the activator's place).
  struct ZeroStep {
    uint32_t apply;
    int64_t want;  // -1: unknown (kpa.go's scaleUnknown)
  };
  ZeroStep ScaleToZero(const FunctionSignals& s);

  KpaParams p_;
  ConcurrencyWindow window_;
  double target_override_ = 0;
  std::optional<double> panic_since_;  // last time the panic condition held
  uint32_t max_panic_pods_ = 0;
  // The PodAutoscaler's Active condition (True: active, False: inactive, Unknown:
  // activating) and when it last changed. A new function starts inactive.
  enum class Active { kFalse, kUnknown, kTrue };
  void Mark(Active a, double now_s);
  Active active_ = Active::kFalse;
  double active_change_s_ = 0;
  std::optional<double> proxy_since_;  // activator in the request path since (SKS proxy mode)
  uint32_t applied_ = 0;               // the scale last applied (what a held decision keeps)
  bool started_ = false;
  double stable_avg_ = 0;
  double panic_avg_ = 0;
};

}  // namespace shoal
