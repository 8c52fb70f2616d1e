// The learned policy's busy-time sizing: how many replicas a function keeps while it is being
// called, as a learned choice among sizing actions (a headroom multiplier on the Erlang-C
// instance count and the lazy scale-down window that holds the largest recent size), per
// context of the function's workload.
//
// Method: a contextual bandit whose context is computed from arrivals only (the load of the last
// ten minutes and their dispersion; the load already divides by the function's concurrency),
// never from what the autoscaler did. Training simulates every training run once per action
// on the same arrivals (functions do not interact in the simulator's unbounded node), and
// charges each function's whole-run outcome (instance-seconds, cold-start requests, SLO misses) to
// the context it spent most intervals in: per interval, charging an outcome to the context in force
// was measured to mix badly (an interval's cost stems from earlier intervals' sizing; the mixed
// policy cost more than any constant action on the training runs). The weights are applied at
// decision time, as for the idle table, and a choice must be kMargin cheaper than the default
// sizing to be taken.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "shoal/control/autoscaler/policy_params.h"
#include "shoal/control/autoscaler/signals.h"

namespace shoal {

struct SizingAction {
  double headroom = 1;  // x the Erlang-C instance count
  double hold_s = 10;   // lazy scale-down window, training-clock seconds
  std::string name;
};

// One interval's outcome, or sums of them.
struct SizingCost {
  double instance_s = 0;  // training-clock seconds
  double cold_requests = 0;
  double slo_misses = 0;
  double Weighted(const LearnedWeights& w) const {
    return w.cost_weight * instance_s + w.cold_weight * cold_requests + w.miss_weight * slo_misses;
  }
};

// The context and action in force and the outcome: of one interval as the policy logs it, or
// of a function's whole run (`intervals` of them) as training charges it.
struct SizingSample {
  size_t state = 0;
  size_t action = 0;
  SizingCost cost;
  uint64_t intervals = 1;
};

// The rolling features a context is made of, per function. Invariant under timeScale: the load
// is a rate times a service time, the dispersion is over control intervals.
class SizingFeatures {
 public:
  static constexpr double kWindowS = 600;  // training-clock seconds
  // token_target > 0 (metric tokensInFlight): the window's mean tokens in flight per that
  // target is a load too, and load() is the larger of the two.
  void Observe(const FunctionSignals& s, double service_s, double time_scale,
               double token_target = 0);
  // Instances the window's mean rate needed (rate x service / slots), or its mean tokens in
  // flight (/ token target) when larger.
  double load() const;
  // Allan variance / mean of the per-interval arrivals (Poisson: 1; a slow drift adds little).
  double dispersion() const;
  uint32_t concurrency() const { return concurrency_; }
  size_t intervals() const { return ticks_.size(); }

 private:
  struct Tick {
    double t, n, d2;  // when, arrivals, squared difference from the previous interval's
    double tokens;    // tokens in flight
  };
  double token_sum_ = 0, token_target_ = 0;
  std::deque<Tick> ticks_;  // the last kWindowS
  double sum_ = 0, sum_d2_ = 0, last_ = 0;
  double service_s_ = 0;  // training clock
  double span_s_ = 0;     // training-clock seconds the window covers
  uint32_t concurrency_ = 1;
};

class SizingTable {
 public:
  struct Cell {
    uint64_t n = 0;  // intervals
    SizingCost sum;
  };

  // The v2 discretisation and action set, an empty table. The context has no concurrency
  // buckets: bench-learned-features measured them (1, 2-4, >= 5) worse on unseen seeds (1.010x)
  // and no better on held-out families; `concurrency_edges` is for that measurement.
  explicit SizingTable(std::vector<uint32_t> concurrency_edges = {});

  // Headroom 1, hold 10 s: the shoal sizing as the version-1 learned policy ran it.
  static constexpr size_t kDefaultAction = 5;
  static constexpr uint64_t kMinSamples = 3000;  // intervals (~2 function-hours) to trust a cell
  static constexpr double kMargin = 0.03;  // how much cheaper than the default a choice must be

  size_t num_states() const;
  size_t num_rows() const { return num_states() + load_edges_.size() + 2; }
  const std::vector<SizingAction>& actions() const { return actions_; }
  size_t StateOf(const SizingFeatures& f) const;
  size_t StateOf(double load, double dispersion, uint32_t concurrency) const;
  std::string DescribeState(size_t state) const;

  void Learn(const SizingSample& s);
  // The action with the least expected weighted cost per interval in `state`, if it is at
  // least kMargin cheaper than kDefaultAction there, else kDefaultAction. Only the context's own
  // row decides (the load-only and global rows are kept in the file for inspection); cells with
  // fewer than kMinSamples intervals are not candidates, and a context whose default cell has
  // fewer keeps the default. `expected` gets the per-interval
  // estimate of the choice.
  size_t Choose(size_t state, const LearnedWeights& w, SizingCost* expected = nullptr) const;
  uint64_t samples() const { return samples_; }

  // The file's "sizing" section: the discretisation and the rows, read and written by
  // LearnedModel (learned_policy.cc).
  const std::vector<double>& load_edges() const { return load_edges_; }
  const std::vector<double>& dispersion_edges() const { return dispersion_edges_; }
  const std::vector<uint32_t>& concurrency_edges() const { return concurrency_edges_; }
  std::vector<Cell>& cells() { return table_; }
  const std::vector<Cell>& cells() const { return table_; }
  void set_samples(uint64_t n) { samples_ = n; }

 private:
  size_t Row(size_t row, size_t action) const { return row * actions_.size() + action; }
  size_t LoadRow(size_t state) const;
  size_t GlobalRow() const { return num_rows() - 1; }

  std::vector<double> load_edges_, dispersion_edges_;
  std::vector<uint32_t> concurrency_edges_;
  std::vector<SizingAction> actions_;
  std::vector<Cell> table_;  // rows: fine states, load-only states, one global row
  uint64_t samples_ = 0;
};

}  // namespace shoal
