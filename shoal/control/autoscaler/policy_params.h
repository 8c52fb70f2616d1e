// Parameters of every autoscaling and keep-alive policy, with their defaults written once here.
// These structs are what a Function manifest's `autoscaling:` block fills in; Validate* names
// the offending parameter so a bad manifest gets a clear message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

// Knative's KPA, with the defaults of Knative's config-autoscaler.
struct KpaParams {
  // Per-instance concurrency target. 0: use the function's concurrency limit
  // (FunctionSignals::concurrency); if both are set the smaller wins (as Knative does with
  // containerConcurrency and the target annotation).
  double target = 0;
  // metric tokensInFlight: the observed load is the function's tokens in flight
  // (FunctionSignals::tokens_in_flight) and `target` is tokens per instance (required, never
  // bounded by the concurrency limit), as Knative's metric/target annotations pair a metric with
  // its own target.
  bool tokens_metric = false;
  double unlimited_target = 100;     // container-concurrency-target-default (no limit set)
  double target_utilization = 0.70;  // container-concurrency-target-percentage
  double stable_window_s = 60;
  double panic_window_percentage = 10;  // of the stable window: 6 s
  double panic_threshold_percentage = 200;
  double max_scale_up_rate = 1000;
  double max_scale_down_rate = 2;
  // Upper bound on how long the last instance stays once the decider says 0: it goes as soon
  // as the activator has been in the request path this long (see KpaPolicy).
  double scale_to_zero_grace_period_s = 30;
  // Lower bound on the same (scale-to-zero-pod-retention-period; Knative's default 0).
  double scale_to_zero_pod_retention_s = 0;
  // Spare concurrency below which the activator stays in the request path (Knative's 211;
  // -1: always; 0: only at zero). Decides how long the grace period really lasts.
  double target_burst_capacity = 211;
  // An activating function (wanted, nothing ready yet) whose decision falls to 0 keeps its
  // scale this long before going to 0 (Knative: the progress deadline, 600 s, + 30 s).
  double activation_timeout_s = 630;
  uint32_t activation_scale = 1;
  bool enable_scale_to_zero = true;
  double bucket_s = 1;  // granularity of the averaging windows
};

// Tabular Q-learning over the per-instance concurrency target (Schuler et al. 2021).
struct RlQParams {
  std::vector<double> targets = {1, 2, 5, 10, 20, 50, 100};
  // Observed concurrency (averaged over a decision interval) is binned by these upper edges;
  // one more bin holds everything above the last edge.
  std::vector<double> load_bin_edges = {1, 2, 5, 10, 20, 50, 100, 200, 500};
  uint32_t initial_target_index = 3;  // 10
  double alpha = 0.1;                 // learning rate
  double gamma = 0.9;                 // discount
  double epsilon = 1.0;               // initial exploration probability
  double epsilon_decay = 0.99;        // multiplied in after every decision
  double epsilon_min = 0.05;
  double decision_interval_s = 30;  // one Q-learning step per interval (0: every call)
  uint64_t seed = 1;
  // reward = served_fraction * latency_factor - cold_start_penalty * cold_starts
  //          - instance_cost * mean_instances
  double cold_start_penalty = 0.05;
  double instance_cost = 0.01;
  double default_slo_s = 1.0;  // when the function gives none
  KpaParams kpa;               // replicas follow the chosen target as KPA does
};

// Per-function idle-time histogram keep-alive (Shahrad et al. 2020) and the fixed baseline.
struct FixedKeepAliveParams {
  double keep_alive_s = 60;
};

struct HistogramKeepAliveParams {
  double bin_s = 60;                    // 1-minute bins
  double range_s = 4 * 3600;            // 4 hours
  double head_percentile = 5;           // pre-warm window
  double tail_percentile = 99;          // keep-alive window
  double margin = 0.10;                 // head shortened, tail lengthened by this fraction
  uint32_t min_samples = 10;            // fewer idle times: not representative
  double cv_threshold = 2.0;            // CV of the bin counts below this: too spread out
  double oob_fraction_threshold = 0.5;  // more idle times beyond range_s: predict instead
  double oob_margin = 0.15;             // window of +-15% around the predicted idle time
  uint32_t oob_history = 5;             // out-of-bounds idle times averaged for the prediction
  // While fewer than min_samples idle times are known, keep alive at least as long as the
  // longest one seen (lengthened by the margin) instead of only the fixed fallback: a function
  // called every 75 s must not go cold on every call while its histogram fills.
  bool cover_observed_idle = true;
  FixedKeepAliveParams fallback;
};

struct KeepAliveParams {
  FixedKeepAliveParams fixed;
  HistogramKeepAliveParams histogram;
};

// Shoal's model-based policy: Holt forecast of the arrival rate, Erlang-C sizing, pre-warming
// ahead of rises a cold start cannot follow, lazy scale-down, histogram keep-alive when idle.
struct ShoalParams {
  double level_smoothing = 0.5;         // Holt alpha
  double trend_smoothing = 0.3;         // Holt beta
  double service_smoothing = 0.2;       // EWMA of the mean service time
  double default_service_s = 0.1;       // until one is observed
  double default_cold_start_s = 1.0;    // until one is observed
  double wait_budget_fraction = 0.1;    // mean queue wait allowed, as a fraction of the SLO
  double default_wait_budget_s = 0.05;  // when the function gives no SLO
  double max_utilization = 0.95;        // never size above this per-slot load
  double scale_down_delay_s = 30;       // keep the largest size of this recent window
  // With no idle time seen yet, keep the function's last instance this long after its last
  // request: the longest KPA's defaults can (60 s stable window + at most 30 s grace), so a
  // function's second call is never colder than under the baseline while the histogram has
  // nothing.
  double first_idle_window_s = 90;
  bool histogram_keep_alive = true;  // keep-alive and idle pre-warming from the histogram
  // metric tokensInFlight: tokens in flight per instance (> 0). Demand is never below
  // ceil(tokens in flight / (token_target x max_utilization)); 0: not used.
  double token_target = 0;
  // Shoal sees every invocation (the paper had per-minute counts), so its histogram uses 10 s
  // bins: pre-warm windows tight enough for timers around the minute.
  HistogramKeepAliveParams keep_alive = [] {
    HistogramKeepAliveParams h;
    h.bin_s = 10;
    return h;
  }();
};

// The learned policy (learned_policy.h): the weights of its reward, applied at decision time.
struct LearnedWeights {
  double cost_weight = 1.0 / 300;  // per instance-second
  double cold_weight = 1;          // per request that waits for a cold start
  double slo_weight = 0;           // more per cold request whose cold start alone exceeds the SLO
  double miss_weight = 1;          // busy-time sizing: per request finished over the SLO
};

class LearnedModel;
struct LearnedParams {
  LearnedWeights weights;
  bool learn_online = false;  // update the table from the function's own idle periods
  // While active: how long an instance above the lazily scaled-down size stays idle (the
  // sizing already keeps the largest size of its scale-down window).
  double excess_keep_alive_s = 10;
  // Seconds of this clock per second of the clock the table was trained on (bench-autoscale-live
  // runs time 10x faster: 0.1). Idle times are divided by it before they meet the table.
  double time_scale = 1;
  // The table: `model` when set (training, tests), else `policy_file`, else the compiled-in
  // deploy/policies/learned-v2.json.
  std::string policy_file;
  std::shared_ptr<const LearnedModel> model;
  // Training only: every interval runs this sizing action instead of the table's (-1: the table).
  int sizing_action = -1;
};

struct PolicyParams {
  KpaParams kpa;
  RlQParams rl_q;
  ShoalParams shoal;  // also the learned policy's active-period sizing
  LearnedParams learned;
};

Status Validate(const KpaParams& p);
Status Validate(const RlQParams& p);
Status Validate(const FixedKeepAliveParams& p);
Status Validate(const HistogramKeepAliveParams& p);
Status Validate(const ShoalParams& p);
Status Validate(const LearnedParams& p);

// The policy factories' step: `Impl(params)` as a `Base` once Validate(params) passes.
template <class Base, class Impl, class Params>
Result<std::unique_ptr<Base>> MakeValidated(const Params& params) {
  SHOAL_RETURN_IF_ERROR(Validate(params));
  return std::unique_ptr<Base>(std::make_unique<Impl>(params));
}

}  // namespace shoal
