// Tabular Q-learning over KPA's per-instance concurrency target (Schuler et al. 2021, "AI-based
// Resource Allocation: Reinforcement Learning for Adaptive Auto-scaling in Serverless
// Environments"). State: (binned load, current target); actions: lower / keep / raise the
// target; reward: requests served within the SLO minus cold-start and instance costs. Replicas
// follow the chosen target through an embedded KPA. Deterministic from the seed.
#pragma once

#include <cstdint>
#include <vector>

#include "shoal/control/autoscaler/kpa_policy.h"
#include "shoal/control/autoscaler/scaling_policy.h"

namespace shoal {

class RlQPolicy final : public ScalingPolicy {
 public:
  enum Action : int { kLower = 0, kKeep = 1, kRaise = 2 };
  static constexpr int kActions = 3;

  // What the environment did over one decision interval.
  struct IntervalStats {
    double elapsed_s = 0;
    uint64_t arrivals = 0;
    uint64_t completions = 0;
    uint64_t cold_starts = 0;
    double worst_p99_s = 0;
    double instance_seconds = 0;     // (ready + starting) integrated over the interval
    double concurrency_seconds = 0;  // observed concurrency integrated over the interval
    double slo_s = 0;
  };

  explicit RlQPolicy(const RlQParams& params);  // params must have passed Validate

  ScalingDecision Observe(const FunctionSignals& s) override;
  const char* name() const override { return "rl-q"; }

  // The learning rule, public for tests: Q(s,a) += alpha * (r + gamma * max_a' Q(s',a') - Q(s,a)).
  // Returns the new Q(s,a).
  double Update(size_t state, int action, double reward, size_t next_state);
  double Reward(const IntervalStats& st) const;
  // epsilon-greedy choice with the current epsilon, then epsilon decays.
  int ChooseAction(size_t state);
  int GreedyAction(size_t state) const;  // ties: keep, then lower, then raise

  size_t LoadBin(double load) const;
  size_t StateIndex(size_t load_bin, size_t target_index) const;
  size_t num_states() const { return load_bins_ * p_.targets.size(); }
  double q(size_t state, int action) const { return q_[state * kActions + action]; }

  // The Q-table, row-major [state][action], for tests and checkpoints.
  const std::vector<double>& q_table() const { return q_; }
  Status LoadQTable(const std::vector<double>& table);

  double epsilon() const { return epsilon_; }
  size_t target_index() const { return target_index_; }
  double target() const { return p_.targets[target_index_]; }
  uint64_t decisions() const { return decisions_; }

 private:
  double Uniform01();

  RlQParams p_;
  size_t load_bins_;
  std::vector<double> q_;
  uint64_t rng_state_;
  double epsilon_;
  size_t target_index_;
  uint64_t decisions_ = 0;
  KpaPolicy kpa_;

  bool started_ = false;
  double interval_start_s_ = 0;
  IntervalStats stats_;
  bool have_pending_ = false;  // a (state, action) waiting for its reward
  size_t pending_state_ = 0;
  int pending_action_ = kKeep;
};

}  // namespace shoal
