#include "shoal/control/autoscaler/function_autoscaler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <sstream>

#include "shoal/common/format_number.h"

namespace shoal {
namespace {

bool Uses(const AutoscalingParamInfo& p, const std::string& policy) {
  std::istringstream in(p.policies);
  std::string w;
  while (in >> w) {
    if (w == policy || w == "all") return true;
    // Histogram parameters apply wherever the histogram keep-alive runs.
    if (w == "histogram") return true;
  }
  return false;
}

std::string Fmt(double v) { return FormatNumber("%g", v); }

}  // namespace

const std::vector<AutoscalingParamInfo>& AutoscalingParamTable() {
  static const std::vector<AutoscalingParamInfo> table = {
      {"stableWindow", true, "kpa rl-q", "KPA stable window (60s)"},
      {"panicWindow", true, "kpa rl-q", "KPA panic window (6s, at most the stable window)"},
      {"panicThreshold", false, "kpa rl-q", "panic when demand >= this % of ready (200)"},
      {"targetUtilization", false, "kpa rl-q", "fraction of the target to aim at (0.7)"},
      {"maxScaleUpRate", false, "kpa rl-q", "at most this x ready per decision (1000)"},
      {"maxScaleDownRate", false, "kpa rl-q", "at least ready / this (2)"},
      {"scaleToZeroGrace", true, "kpa rl-q",
       "the last instance stays at most this long once the decision is 0 (30s)"},
      {"scaleToZeroPodRetention", true, "kpa rl-q",
       "the last instance stays at least this long once the decision is 0 (0s)"},
      {"targetBurstCapacity", false, "kpa rl-q",
       "spare concurrency below which the activator stays in the path (211; -1 always)"},
      {"activationScale", false, "kpa rl-q", "minimum scale when active (1)"},
      {"activationTimeout", true, "kpa rl-q",
       "an activating function whose decision is 0 keeps its scale this long (630s)"},
      {"decisionInterval", true, "rl-q", "one Q-learning step per interval (30s)"},
      {"learningRate", false, "rl-q", "Q-learning alpha (0.1)"},
      {"discount", false, "rl-q", "Q-learning gamma (0.9)"},
      {"epsilon", false, "rl-q", "initial exploration probability (1)"},
      {"costWeight", false, "learned", "reward weight per instance-second (1/60)"},
      {"coldWeight", false, "learned", "reward weight per cold-start request (1)"},
      {"sloWeight", false, "learned",
       "extra weight per cold request whose cold start exceeds the slo (0)"},
      {"missWeight", false, "learned",
       "busy-time sizing: reward weight per request finished over the slo (1)"},
      {"learnOnline", false, "learned", "1: keep learning from the function's idle periods (0)"},
      {"timeScale", false, "learned",
       "seconds here per second of the training clock (1; 0.1 for time run 10x faster)"},
      {"excessKeepAlive", true, "learned",
       "while active, instances above the lazily scaled-down size stay this long idle (10s)"},
      {"scaleDownDelay", true, "shoal learned",
       "keep the largest size of this window (30s; learned 10s)"},
      {"waitBudget", true, "shoal learned", "mean queue wait allowed without an slo (50ms)"},
      {"maxUtilization", false, "shoal learned", "per-slot load never above this (0.95)"},
      {"coldStart", true, "shoal learned", "cold-start estimate until one is measured (1s)"},
      {"firstIdleWindow", true, "shoal",
       "keep the last instance this long before any idle "
       "period is known (90s)"},
      {"slo", true, "all", "latency objective (none)"},
      {"histogramBin", true, "histogram", "idle-time histogram bin (1m)"},
      {"histogramRange", true, "histogram", "idle times beyond this are out of range (4h)"},
      {"headPercentile", false, "histogram", "pre-warm window percentile (5)"},
      {"tailPercentile", false, "histogram", "keep-alive window percentile (99)"},
      {"minSamples", false, "histogram", "idle times before the histogram is trusted (10)"},
  };
  return table;
}

const AutoscalingParamInfo* FindAutoscalingParam(std::string_view name) {
  for (const auto& p : AutoscalingParamTable()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

Status BuildAutoscalingParams(const AutoscalingConfig& c, PolicyParams* out, KeepAliveParams* ka,
                              double* slo_s) {
  const auto& policies = kAutoscalingPolicies;
  if (std::find(std::begin(policies), std::end(policies), c.policy) == std::end(policies)) {
    return InvalidArgument("policy: must be none, kpa, rl-q, shoal or learned, got \"" + c.policy +
                           "\"");
  }
  if (c.keep_alive != "fixed" && c.keep_alive != "histogram") {
    return InvalidArgument("keepAlive: must be fixed or histogram, got \"" + c.keep_alive + "\"");
  }
  if (!(c.target >= 0) || !std::isfinite(c.target)) {
    return InvalidArgument("target: must be >= 0, got " + Fmt(c.target));
  }
  if (!c.policy_file.empty() && c.policy != "learned") {
    return InvalidArgument("policyFile: only with policy learned (policy is " + c.policy + ")");
  }
  if (c.policy == "none" && (!c.params.empty() || c.target > 0 || c.keep_alive != "fixed")) {
    return InvalidArgument("policy: none takes no target, params or histogram keep-alive");
  }
  const bool tokens = c.metric == "tokensInFlight";
  if (!tokens && c.metric != "concurrency") {
    return InvalidArgument("metric: must be concurrency or tokensInFlight, got \"" + c.metric +
                           "\"");
  }
  if (tokens && (c.policy == "none" || c.policy == "rl-q")) {
    return InvalidArgument("metric: tokensInFlight needs policy kpa, shoal or learned (policy is " +
                           c.policy + ")");
  }
  if (tokens && !(c.target > 0)) {
    return InvalidArgument("target: metric tokensInFlight needs a target (tokens per instance)");
  }
  PolicyParams p;
  KeepAliveParams k;
  k.fixed.keep_alive_s = c.fixed_keep_alive_s;
  k.histogram.fallback.keep_alive_s = c.fixed_keep_alive_s;
  p.shoal.keep_alive.fallback.keep_alive_s = c.fixed_keep_alive_s;
  p.shoal.histogram_keep_alive = c.keep_alive == "histogram";
  p.learned.policy_file = c.policy_file;
  // The learned policy decides what stays through idle periods itself; its sizing's lazy
  // scale-down only rides out short dips (measured: 10 s brings bursty/diurnal onto the fixed
  // keep-alive frontier, 30 s keeps it 2-4 % above).
  if (c.policy == "learned") p.shoal.scale_down_delay_s = kLearnedScaleDownDelayS;
  p.learned.model = c.learned_model;
  p.learned.sizing_action = c.learned_sizing_action;
  p.kpa.target = c.target;
  p.kpa.tokens_metric = tokens;
  p.rl_q.kpa.target = c.target;
  if (tokens) p.shoal.token_target = c.target;
  double slo = 0;
  std::optional<double> panic_window;
  for (const auto& [name, v] : c.params) {
    const AutoscalingParamInfo* info = FindAutoscalingParam(name);
    const std::string where = "params." + name + ": ";
    if (info == nullptr) {
      std::string known;
      for (const auto& i : AutoscalingParamTable()) {
        if (Uses(i, c.policy)) known += (known.empty() ? "" : ", ") + std::string(i.name);
      }
      return InvalidArgument(where + "unknown parameter (known for " + c.policy + ": " + known +
                             ")");
    }
    if (!Uses(*info, c.policy)) {
      return InvalidArgument(where + "not a parameter of policy " + c.policy + " (it is for " +
                             info->policies + ")");
    }
    const std::string_view n = name;
    auto set_kpa = [&](auto member) {
      p.kpa.*member = v;
      p.rl_q.kpa.*member = v;
    };
    if (n == "stableWindow")
      set_kpa(&KpaParams::stable_window_s);
    else if (n == "panicWindow")
      panic_window = v;
    else if (n == "panicThreshold")
      set_kpa(&KpaParams::panic_threshold_percentage);
    else if (n == "targetUtilization")
      set_kpa(&KpaParams::target_utilization);
    else if (n == "maxScaleUpRate")
      set_kpa(&KpaParams::max_scale_up_rate);
    else if (n == "maxScaleDownRate")
      set_kpa(&KpaParams::max_scale_down_rate);
    else if (n == "scaleToZeroGrace")
      set_kpa(&KpaParams::scale_to_zero_grace_period_s);
    else if (n == "scaleToZeroPodRetention")
      set_kpa(&KpaParams::scale_to_zero_pod_retention_s);
    else if (n == "targetBurstCapacity")
      set_kpa(&KpaParams::target_burst_capacity);
    else if (n == "activationTimeout")
      set_kpa(&KpaParams::activation_timeout_s);
    else if (n == "activationScale") {
      if (!(v >= 1 && v == std::floor(v)))
        return InvalidArgument(where + "must be an integer >= 1, got " + Fmt(v));
      p.kpa.activation_scale = p.rl_q.kpa.activation_scale = static_cast<uint32_t>(v);
    } else if (n == "decisionInterval")
      p.rl_q.decision_interval_s = v;
    else if (n == "learningRate")
      p.rl_q.alpha = v;
    else if (n == "discount")
      p.rl_q.gamma = v;
    else if (n == "epsilon")
      p.rl_q.epsilon = v;
    else if (n == "costWeight")
      p.learned.weights.cost_weight = v;
    else if (n == "coldWeight")
      p.learned.weights.cold_weight = v;
    else if (n == "sloWeight")
      p.learned.weights.slo_weight = v;
    else if (n == "missWeight")
      p.learned.weights.miss_weight = v;
    else if (n == "excessKeepAlive")
      p.learned.excess_keep_alive_s = v;
    else if (n == "timeScale")
      p.learned.time_scale = v;
    else if (n == "learnOnline") {
      if (v != 0 && v != 1) return InvalidArgument(where + "must be 0 or 1, got " + Fmt(v));
      p.learned.learn_online = v == 1;
    } else if (n == "scaleDownDelay")
      p.shoal.scale_down_delay_s = v;
    else if (n == "waitBudget")
      p.shoal.default_wait_budget_s = v;
    else if (n == "maxUtilization")
      p.shoal.max_utilization = v;
    else if (n == "coldStart")
      p.shoal.default_cold_start_s = v;
    else if (n == "firstIdleWindow")
      p.shoal.first_idle_window_s = v;
    else if (n == "slo") {
      if (!(v > 0)) return InvalidArgument(where + "must be > 0, got " + Fmt(v));
      slo = v;
    } else {
      HistogramKeepAliveParams* hs[] = {&k.histogram, &p.shoal.keep_alive};
      for (HistogramKeepAliveParams* h : hs) {
        if (n == "histogramBin")
          h->bin_s = v;
        else if (n == "histogramRange")
          h->range_s = v;
        else if (n == "headPercentile")
          h->head_percentile = v;
        else if (n == "tailPercentile")
          h->tail_percentile = v;
        else if (n == "minSamples") {
          if (!(v >= 1 && v == std::floor(v) && v < 1e6))
            return InvalidArgument(where + "must be an integer >= 1, got " + Fmt(v));
          h->min_samples = static_cast<uint32_t>(v);
        }
      }
      if (c.keep_alive != "histogram") {
        return InvalidArgument(where + "only with keepAlive: histogram");
      }
    }
  }
  if (panic_window) {
    const double stable = p.kpa.stable_window_s;
    if (!(*panic_window <= stable)) {
      return InvalidArgument("params.panicWindow: must be <= the stable window (" + Fmt(stable) +
                             " s), got " + Fmt(*panic_window) + " s");
    }
    p.kpa.panic_window_percentage = p.rl_q.kpa.panic_window_percentage =
        100.0 * *panic_window / stable;
  }
  // Buckets no wider than the panic window, so a short window still averages something.
  const double panic_s = p.kpa.stable_window_s * p.kpa.panic_window_percentage / 100;
  if (p.kpa.bucket_s > panic_s) p.kpa.bucket_s = p.rl_q.kpa.bucket_s = panic_s;

  // Translate the structs' own messages ("kpa.stable_window_s must be > 0") into the
  // manifest's vocabulary by prefixing where they came from.
  Status st;
  if (c.policy == "kpa") st = Validate(p.kpa);
  if (c.policy == "rl-q") st = Validate(p.rl_q);
  if (c.policy == "shoal") st = Validate(p.shoal);
  if (c.policy == "learned") st = Validate(p.shoal);
  if (c.policy == "learned" && st.ok()) st = Validate(p.learned);
  if (st.ok() && c.keep_alive == "histogram") st = Validate(k.histogram);
  if (st.ok()) st = Validate(k.fixed);
  if (!st.ok()) return InvalidArgument("params: " + st.message());
  if (out) *out = p;
  if (ka) *ka = k;
  if (slo_s) *slo_s = slo;
  return {};
}

AutoscalingConfig AutoscalingConfigOf(const FunctionSpec& spec) {
  AutoscalingConfig c;
  c.policy = spec.autoscaling.policy;
  c.target = spec.autoscaling.target;
  c.metric = spec.autoscaling.metric;
  c.keep_alive = spec.autoscaling.keep_alive;
  c.params = spec.autoscaling.params;
  c.policy_file = spec.autoscaling.policy_file;
  c.fixed_keep_alive_s = spec.keep_alive_s;
  return c;
}

Result<std::unique_ptr<FunctionAutoscaler>> FunctionAutoscaler::Make(const AutoscalingConfig& c) {
  PolicyParams p;
  KeepAliveParams k;
  double slo = 0;
  SHOAL_RETURN_IF_ERROR(BuildAutoscalingParams(c, &p, &k, &slo));
  if (c.policy == "none") return InvalidArgument("policy: none runs no policy object");
  std::unique_ptr<FunctionAutoscaler> a(new FunctionAutoscaler(c));
  auto policy = MakeScalingPolicy(c.policy, p);
  if (!policy.ok()) return policy.status();
  a->policy_ = std::move(policy).value();
  // Shoal's policy runs its own histogram and the learned policy its own idle actions; KPA and
  // RL-Q leave keep-alive to the platform.
  if (c.keep_alive == "histogram" && c.policy != "shoal" && c.policy != "learned") {
    a->histogram_ = std::make_unique<HistogramKeepAlive>(k.histogram);
  }
  a->slo_s_ = slo;
  return a;
}

ScalingDecision FunctionAutoscaler::Observe(FunctionSignals s) {
  if (s.slo_s <= 0) s.slo_s = slo_s_;
  if (histogram_ && s.arrivals > 0) histogram_->OnInvocations(s.now_s, s.arrivals);
  ScalingDecision d = policy_->Observe(s);
  if (d.keep_alive_s <= 0) {
    if (histogram_) {
      // KPA keeps its last instance through the grace period anyway; the histogram only
      // decides how long instances above the target stay, covering the predicted next call.
      const KeepAliveDecision ka = histogram_->Decide();
      d.keep_alive_s = ka.prewarm_after_s + ka.keep_alive_s;
    } else {
      d.keep_alive_s = config_.fixed_keep_alive_s;
    }
  }
  return d;
}

}  // namespace shoal
