#include "shoal/control/autoscaler/policy_params.h"

#include <cmath>
#include <string>

#include "shoal/common/format_number.h"

namespace shoal {
namespace {

// Small checkers that name the parameter: "kpa.stable_window_s must be > 0 (got -1)".
class Checker {
 public:
  explicit Checker(const char* prefix) : prefix_(prefix) {}
  void Positive(const char* name, double v) {
    if (!(v > 0) || !std::isfinite(v)) Fail(name, "must be > 0", v);
  }
  void NonNegative(const char* name, double v) {
    if (!(v >= 0) || !std::isfinite(v)) Fail(name, "must be >= 0", v);
  }
  void Fraction(const char* name, double v) {  // [0, 1]
    if (!(v >= 0 && v <= 1)) Fail(name, "must be in [0, 1]", v);
  }
  void OpenFraction(const char* name, double v) {  // (0, 1]
    if (!(v > 0 && v <= 1)) Fail(name, "must be in (0, 1]", v);
  }
  void Percent(const char* name, double v) {  // (0, 100]
    if (!(v > 0 && v <= 100)) Fail(name, "must be in (0, 100]", v);
  }
  void Fail(const char* name, const char* rule, double v) {
    FailText(name, std::string(rule) + " (got " + FormatNumber("%g", v) + ")");
  }
  void FailText(const std::string& name, const std::string& text) {
    if (status_.ok()) status_ = InvalidArgument(prefix_ + "." + name + " " + text);
  }
  // A nested struct's own Validate: "rl_q.kpa invalid: kpa.stable_window_s must be > 0 (got 0)".
  void Nested(const char* name, const Status& st) {
    if (!st.ok()) FailText(name, "invalid: " + st.message());
  }
  Status status() const { return status_; }

 private:
  std::string prefix_;
  Status status_;
};

}  // namespace

Status Validate(const KpaParams& p) {
  Checker c("kpa");
  c.NonNegative("target", p.target);
  if (p.tokens_metric && !(p.target > 0))
    c.Fail("target", "must be > 0 (tokens per instance) with metric tokensInFlight", p.target);
  c.Positive("unlimited_target", p.unlimited_target);
  c.OpenFraction("target_utilization", p.target_utilization);
  c.Positive("stable_window_s", p.stable_window_s);
  c.Percent("panic_window_percentage", p.panic_window_percentage);
  c.Positive("panic_threshold_percentage", p.panic_threshold_percentage);
  if (!(p.max_scale_up_rate > 1)) c.Fail("max_scale_up_rate", "must be > 1", p.max_scale_up_rate);
  if (!(p.max_scale_down_rate > 1))
    c.Fail("max_scale_down_rate", "must be > 1", p.max_scale_down_rate);
  c.NonNegative("scale_to_zero_grace_period_s", p.scale_to_zero_grace_period_s);
  c.NonNegative("scale_to_zero_pod_retention_s", p.scale_to_zero_pod_retention_s);
  c.Positive("activation_timeout_s", p.activation_timeout_s);
  if (!std::isfinite(p.target_burst_capacity) ||
      !(p.target_burst_capacity >= 0 || p.target_burst_capacity == -1))
    c.Fail("target_burst_capacity", "must be >= 0 or -1", p.target_burst_capacity);
  if (p.activation_scale < 1) c.Fail("activation_scale", "must be >= 1", p.activation_scale);
  c.Positive("bucket_s", p.bucket_s);
  if (p.bucket_s > p.stable_window_s * p.panic_window_percentage / 100)
    c.Fail("bucket_s", "must not exceed the panic window", p.bucket_s);
  return c.status();
}

Status Validate(const RlQParams& p) {
  Checker c("rl_q");
  if (p.targets.empty()) c.FailText("targets", "must not be empty");
  for (size_t i = 0; i < p.targets.size(); ++i) {
    if (!(p.targets[i] > 0)) c.Fail("targets", "must all be > 0", p.targets[i]);
    if (i > 0 && !(p.targets[i] > p.targets[i - 1]))
      c.FailText("targets", "must be strictly increasing");
  }
  for (size_t i = 1; i < p.load_bin_edges.size(); ++i)
    if (!(p.load_bin_edges[i] > p.load_bin_edges[i - 1]))
      c.FailText("load_bin_edges", "must be strictly increasing");
  if (p.initial_target_index >= p.targets.size())
    c.Fail("initial_target_index", "must index targets", p.initial_target_index);
  c.OpenFraction("alpha", p.alpha);
  c.Fraction("gamma", p.gamma);
  c.Fraction("epsilon", p.epsilon);
  c.OpenFraction("epsilon_decay", p.epsilon_decay);
  c.Fraction("epsilon_min", p.epsilon_min);
  c.NonNegative("decision_interval_s", p.decision_interval_s);
  c.NonNegative("cold_start_penalty", p.cold_start_penalty);
  c.NonNegative("instance_cost", p.instance_cost);
  c.Positive("default_slo_s", p.default_slo_s);
  c.Nested("kpa", Validate(p.kpa));
  return c.status();
}

Status Validate(const FixedKeepAliveParams& p) {
  Checker c("keep_alive.fixed");
  c.NonNegative("keep_alive_s", p.keep_alive_s);
  return c.status();
}

Status Validate(const HistogramKeepAliveParams& p) {
  Checker c("keep_alive.histogram");
  c.Positive("bin_s", p.bin_s);
  c.Positive("range_s", p.range_s);
  if (p.range_s < p.bin_s) c.Fail("range_s", "must be >= bin_s", p.range_s);
  if (p.range_s / p.bin_s > 1e6) c.Fail("range_s", "must be at most 1e6 bins", p.range_s);
  c.Percent("head_percentile", p.head_percentile);
  c.Percent("tail_percentile", p.tail_percentile);
  if (p.head_percentile > p.tail_percentile)
    c.Fail("head_percentile", "must be <= tail_percentile", p.head_percentile);
  if (!(p.margin >= 0 && p.margin < 1)) c.Fail("margin", "must be in [0, 1)", p.margin);
  c.NonNegative("cv_threshold", p.cv_threshold);
  c.Fraction("oob_fraction_threshold", p.oob_fraction_threshold);
  if (!(p.oob_margin >= 0 && p.oob_margin < 1))
    c.Fail("oob_margin", "must be in [0, 1)", p.oob_margin);
  if (p.oob_history < 1) c.Fail("oob_history", "must be >= 1", p.oob_history);
  c.Nested("fallback", Validate(p.fallback));
  return c.status();
}

Status Validate(const ShoalParams& p) {
  Checker c("shoal");
  c.OpenFraction("level_smoothing", p.level_smoothing);
  c.Fraction("trend_smoothing", p.trend_smoothing);
  c.OpenFraction("service_smoothing", p.service_smoothing);
  c.Positive("default_service_s", p.default_service_s);
  c.NonNegative("default_cold_start_s", p.default_cold_start_s);
  c.Positive("wait_budget_fraction", p.wait_budget_fraction);
  c.Positive("default_wait_budget_s", p.default_wait_budget_s);
  if (!(p.max_utilization > 0 && p.max_utilization < 1))
    c.Fail("max_utilization", "must be in (0, 1)", p.max_utilization);
  c.NonNegative("scale_down_delay_s", p.scale_down_delay_s);
  c.NonNegative("first_idle_window_s", p.first_idle_window_s);
  c.Nested("keep_alive", Validate(p.keep_alive));
  return c.status();
}

Status Validate(const LearnedParams& p) {
  Checker c("learned");
  c.NonNegative("cost_weight", p.weights.cost_weight);
  c.NonNegative("cold_weight", p.weights.cold_weight);
  c.NonNegative("slo_weight", p.weights.slo_weight);
  c.NonNegative("miss_weight", p.weights.miss_weight);
  c.NonNegative("excess_keep_alive_s", p.excess_keep_alive_s);
  c.Positive("time_scale", p.time_scale);
  if (p.weights.cost_weight == 0 && p.weights.cold_weight == 0 && p.weights.slo_weight == 0 &&
      p.weights.miss_weight == 0)
    c.FailText("weights", "must not all be 0");
  return c.status();
}

}  // namespace shoal
