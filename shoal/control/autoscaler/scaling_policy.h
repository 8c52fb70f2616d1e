// The autoscaling policy interface: every control interval a policy sees one function's
// signals and decides its replicas, per-instance target, pre-warmed instances and keep-alive.
// shoald's instance manager and the simulator call the same implementations through it.
#pragma once

#include <memory>
#include <string>

#include "shoal/common/status.h"
#include "shoal/control/autoscaler/policy_params.h"
#include "shoal/control/autoscaler/signals.h"

namespace shoal {

class ScalingPolicy {
 public:
  virtual ~ScalingPolicy() = default;
  // One call per control interval, with non-decreasing signals.now_s. Not thread-safe: one
  // policy object per function.
  virtual ScalingDecision Observe(const FunctionSignals& signals) = 0;
  virtual const char* name() const = 0;
  // Why the last decision is what it is, beyond its numbers (shoal describe); may be empty.
  virtual std::string Explain() const { return {}; }
};

// "kpa", "rl-q" or "shoal"; the parameters of the named policy are validated.
Result<std::unique_ptr<ScalingPolicy>> MakeScalingPolicy(const std::string& name,
                                                         const PolicyParams& params);

// Clamps to the function's [min_scale, max_scale]; max_scale 0 means unbounded (Knative).
uint32_t ClampScale(uint64_t replicas, const FunctionSignals& s);

}  // namespace shoal
