// The learned policy: while a function is active it sizes replicas with the shoal policy's
// machinery (Holt forecast, Erlang C, lazy scale-down, pre-warm ahead of a rising forecast)
// under a sizing action its busy-time table picks (a headroom multiplier and the scale-down
// window; learned_sizing.h); every time the function goes idle it picks one of a small set of
// idle actions (keep the last instance K seconds, or release it and pre-warm the last burst's
// size for a window predicted from the function's idle-time history). Both tables are trained
// offline in the simulator and shipped in one versioned file.
//
// Method: a full-information contextual bandit. The arrivals that end an idle period do not
// depend on what the autoscaler did during it, so once the period's length T is known the cost
// of *every* action on that period (idle instance-seconds, cold-start requests) is computed
// exactly, not only the cost of the action taken. Training therefore needs no exploration: it
// logs idle periods in the simulator and averages each action's two cost components per state.
// The state is the function's idle-time history (how many idle periods, their median and their
// spread q90/q10), the shape that decides which window covers the next call; actions relative
// to the history (pre-warm at its 5th percentile) carry over to periods never seen in training.
// The manifest's weights (costWeight per instance-second, coldWeight per cold request,
// sloWeight per cold request that misses the SLO) are applied at decision time, so one trained
// file serves every weight and the frontier is swept without retraining.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/control/autoscaler/learned_sizing.h"
#include "shoal/control/autoscaler/scaling_policy.h"
#include "shoal/control/autoscaler/shoal_policy.h"

namespace shoal {

// One idle action. kKeep holds `held` instances until the idle time reaches the window; kPrewarm
// releases everything and brings the last burst's size back for the window.
struct LearnedAction {
  enum class Kind : uint8_t { kKeep, kPrewarm };
  Kind kind = Kind::kKeep;
  // Window from the start of the idle period: an absolute number of seconds when `relative` is
  // false; else quantiles of the idle-time history (lo for a pre-warm's start, hi for the end),
  // lengthened or shortened by `margin`.
  bool relative = false;
  double seconds = 0;
  double lo_quantile = 0, hi_quantile = 0;
  double margin = 0;
  std::string name;
};

// The idle-time history a decision is conditioned on.
struct IdleHistory {
  std::deque<double> idle_s;  // the latest idle periods (seconds), oldest first
  double Quantile(double q) const;
};

// What an idle period turned out to be, enough to score every action on it.
struct IdlePeriod {
  size_t state = 0;
  std::vector<double> quantiles;  // the history's quantiles the actions name, at decision time
  double idle_s = 0;              // realised: last activity to the next (interval-quantised)
  double cold_start_s = 1;        // the function's cold-start cost at decision time
  double interval_s = 2;
  double resume_arrivals = 1;  // arrivals in the interval the period ended with
  uint32_t burst_peak = 1;     // instances the last active period needed
  uint32_t history = 0;        // idle periods known at decision time
  // Recorded for state-feature experiments (bench-learned-features); the state does not use
  // them. Arrival rates (per second, training clock) over the minute and the ten minutes before
  // the period began; the mean queue wait of the active period that just ended (training-clock
  // seconds); the idle period before that active period (time since the call before it; 0 when
  // none); the function's per-instance concurrency.
  double rate_1m = 0, rate_10m = 0;
  double queue_wait_s = 0;
  double previous_idle_s = 0;
  uint32_t concurrency = 1;
};

// Cost of one action on one idle period.
struct ActionCost {
  bool valid = false;  // the action needs more history than there was
  double cold_requests = 0;
  double instance_s = 0;
};

// The trained table and its discretisation: what `shoal sim train` writes and the policy reads.
class LearnedModel {
 public:
  static constexpr const char* kFormat = "shoal-learned-policy";
  // Version 2 adds the busy-time sizing table. A version-1 file (idle table only) is still read:
  // its functions size replicas with the fixed default sizing action, which Explain says.
  static constexpr int kVersion = 2;
  static constexpr int kOldestVersion = 1;
  static constexpr size_t kHistory = 32;  // idle periods remembered per function

  LearnedModel();  // the idle discretisation and action set, empty tables, version kVersion

  size_t num_states() const;
  size_t num_actions() const { return actions_.size(); }
  const std::vector<LearnedAction>& actions() const { return actions_; }
  // The state of a function with this history.
  size_t StateOf(const IdleHistory& h) const;
  // The coarse state (history count and spread only) a sparse fine state falls back to.
  size_t CoarseOf(size_t state) const;
  std::vector<double> QuantilesOf(const IdleHistory& h) const;
  std::string DescribeState(size_t state) const;

  // Scores action `a` on a finished idle period (exact counterfactual).
  ActionCost Score(size_t a, const IdlePeriod& p) const;
  // Adds a finished idle period to the table (every action's cost).
  void Learn(const IdlePeriod& p);
  // The action with the least expected weighted cost in `state` (fine state when it has
  // min_samples periods, else the coarse one, else the global row); `fallback` when no row
  // has data. `expected` gets the chosen action's (cold, instance-s) estimate.
  size_t Choose(size_t state, const LearnedWeights& w, size_t fallback,
                ActionCost* expected = nullptr) const;
  uint64_t samples() const { return total_samples_; }

  // The busy-time sizing table; has_sizing() is false for a version-1 file.
  const SizingTable& sizing() const { return sizing_; }
  SizingTable& mutable_sizing() { return sizing_; }
  bool has_sizing() const { return version_ >= 2; }
  int version() const { return version_; }

  // Training metadata written into the file (informational; not used for decisions).
  std::string trained_on;  // families and seeds
  uint64_t seed = 0;
  uint32_t min_samples = 3;

  std::string Serialize() const;  // canonical JSON; Parse(Serialize()) round-trips exactly
  // InvalidArgument naming what is wrong: not JSON, wrong format, an incompatible version,
  // another discretisation or action set, a table of the wrong size, a negative or non-finite
  // entry, a checksum mismatch.
  static Result<LearnedModel> Parse(std::string_view text, const std::string& origin);
  static Result<LearnedModel> Load(const std::string& path);
  // The policy shipped in deploy/policies/learned-v2.json, compiled in.
  static std::shared_ptr<const LearnedModel> Default();

 private:
  struct Cell {
    uint64_t n = 0;
    double cold = 0, inst = 0;  // sums over the periods
  };
  size_t Row(size_t table_state, size_t action) const {
    return table_state * actions_.size() + action;
  }
  uint64_t Checksum() const;  // of the idle table, and the sizing table from version 2 on

  std::vector<double> median_edges_, spread_edges_;
  std::vector<uint32_t> count_edges_;
  std::vector<double> quantiles_;  // the history quantiles the actions use
  std::vector<LearnedAction> actions_;
  // Rows: fine states, then coarse states, then one global row.
  std::vector<Cell> table_;
  uint64_t total_samples_ = 0;
  SizingTable sizing_;
  int version_ = kVersion;
};

class LearnedPolicy final : public ScalingPolicy {
 public:
  // `sizing`: the shoal policy's parameters for active periods (its histogram is not used).
  LearnedPolicy(const LearnedParams& params, const ShoalParams& sizing,
                std::shared_ptr<const LearnedModel> model);

  ScalingDecision Observe(const FunctionSignals& s) override;
  const char* name() const override { return "learned"; }

  // The idle action in force (or the last one), for describe and tests.
  const LearnedAction* current_action() const;
  std::string Explain() const override;
  const LearnedModel& model() const { return *model_; }
  const IdleHistory& history() const { return history_; }
  // Every idle period this policy saw end (training collects them).
  void set_recorder(std::vector<IdlePeriod>* out) { recorder_ = out; }
  // Every interval's outcome with the sizing context and action that were in force.
  void set_sizing_recorder(std::vector<SizingSample>* out) { sizing_recorder_ = out; }
  size_t sizing_action() const { return sizing_action_; }
  const SizingFeatures& sizing_features() const { return features_; }

 private:
  void StartIdle(const FunctionSignals& s);
  void EndIdle(const FunctionSignals& s, double idle_s);

  LearnedParams p_;
  std::shared_ptr<const LearnedModel> model_;
  double token_target_ = 0;  // metric tokensInFlight: the sizing context reads tokens as load
  std::shared_ptr<LearnedModel> own_;  // copy-on-learn when learning online
  ShoalPolicy sizing_;
  IdleHistory history_;
  std::optional<double> last_activity_s_;
  bool idle_ = false;
  IdlePeriod pending_;
  size_t action_ = 0;
  bool have_action_ = false;
  double window_lo_ = 0, window_hi_ = 0;  // seconds of idle time (resolved action)
  ActionCost expected_;
  uint32_t burst_peak_ = 0, last_burst_peak_ = 1;
  double last_interval_s_ = 2;
  std::deque<std::pair<double, uint64_t>> arrivals_;  // (now, arrivals) per tick, last 10 min
  std::vector<IdlePeriod>* recorder_ = nullptr;
  // Busy-time sizing.
  SizingFeatures features_;
  size_t sizing_state_ = 0, sizing_action_ = SizingTable::kDefaultAction;
  bool have_sizing_ = false;
  SizingCost sizing_expected_;
  std::vector<SizingSample>* sizing_recorder_ = nullptr;
  // Of the active period in progress: queue wait summed over its dispatches, for IdlePeriod.
  double active_wait_s_ = 0, active_dispatched_ = 0, last_active_wait_s_ = 0;
};

}  // namespace shoal
