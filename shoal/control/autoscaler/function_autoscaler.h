// One function's autoscaling as its manifest's `autoscaling:` block configures it: a scaling
// policy (kpa, rl-q, shoal) and a keep-alive policy (fixed, histogram), built from the block's
// named parameters and combined into one decision per control interval. shoald's instance
// manager and the simulator's scenarios both drive this class, so live and simulated runs
// execute the same code.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/control/autoscaler/keep_alive.h"
#include "shoal/control/autoscaler/policy_params.h"
#include "shoal/control/autoscaler/scaling_policy.h"
#include "shoal/interfaces/function_spec.h"

namespace shoal {

// "none" is shoald's reactive scaler (no policy object): as many instances as the requests
// present need, idle ones stop after the function's keepAlive.
inline constexpr const char* kAutoscalingPolicies[] = {"none", "kpa", "rl-q", "shoal", "learned"};
inline constexpr const char* kKeepAlivePolicies[] = {"fixed", "histogram"};
// What `target` is a target of: requests in flight per instance, or (language models) tokens in
// flight per instance (FunctionSignals::tokens_in_flight; Knative's metric annotation).
inline constexpr const char* kAutoscalingMetrics[] = {"concurrency", "tokensInFlight"};
// The learned policy's scaleDownDelay unless its params give one (shoal's is 30 s).
inline constexpr double kLearnedScaleDownDelayS = 10;
// The policy a manifest gets when its autoscaling block names none (see README: the one that
// measured best in bench-autoscale).
inline constexpr const char* kDefaultAutoscalingPolicy = "shoal";

struct AutoscalingConfig {
  std::string policy = "none";
  double target = 0;  // per-instance concurrency target (0: the function's concurrency)
  std::string metric = "concurrency";  // concurrency | tokensInFlight (target: tokens/instance)
  std::string keep_alive = "fixed";
  // Manifest names (camelCase) -> values; durations already in seconds.
  std::map<std::string, double> params;
  double fixed_keep_alive_s = 60;  // the function's keepAlive: the fixed policy's window
  // learned: the trained table to load (empty: the compiled-in deploy/policies/learned-v2.json).
  std::string policy_file;
  std::shared_ptr<const LearnedModel> learned_model;  // set: use it instead of any file
  int learned_sizing_action = -1;  // training: force this busy-time sizing action
};

// A parameter the `params:` map accepts.
struct AutoscalingParamInfo {
  const char* name;
  bool duration;         // written as a duration (250ms, 6s, 1m)
  const char* policies;  // which policies read it, for messages ("kpa rl-q")
  const char* what;
};
const std::vector<AutoscalingParamInfo>& AutoscalingParamTable();
const AutoscalingParamInfo* FindAutoscalingParam(std::string_view name);

// A function's manifest `autoscaling:` block (and its keepAlive) as the config above: what a
// node, the manifest parser and the cluster's leader each build their autoscaler from.
AutoscalingConfig AutoscalingConfigOf(const FunctionSpec& spec);

// Fills the policies' parameter structs from the config. Errors name the offending entry as
// "params.<name>: ..." (or "policy"/"keepAlive"/"target"), so a manifest parser can point at
// its line.
Status BuildAutoscalingParams(const AutoscalingConfig& config, PolicyParams* policy,
                              KeepAliveParams* keep_alive, double* slo_s);

class FunctionAutoscaler {
 public:
  // InvalidArgument for policy "none" or a bad config (see BuildAutoscalingParams).
  static Result<std::unique_ptr<FunctionAutoscaler>> Make(const AutoscalingConfig& config);

  // One control interval: the scaling policy's decision, with the keep-alive policy's window
  // where the scaling policy leaves keep-alive to the platform (keep_alive_s == 0).
  ScalingDecision Observe(FunctionSignals signals);

  const std::string& policy_name() const { return config_.policy; }
  const std::string& keep_alive_name() const { return config_.keep_alive; }
  double slo_s() const { return slo_s_; }
  ScalingPolicy& policy() { return *policy_; }

 private:
  explicit FunctionAutoscaler(AutoscalingConfig config) : config_(std::move(config)) {}

  AutoscalingConfig config_;
  std::unique_ptr<ScalingPolicy> policy_;
  std::unique_ptr<HistogramKeepAlive> histogram_;  // kpa/rl-q with keepAlive: histogram
  double slo_s_ = 0;
};

}  // namespace shoal
