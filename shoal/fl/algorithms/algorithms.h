// The FL aggregation algorithms (FL-ALGORITHMS.md), each written as a weighted sum plus a final
// step so leaf aggregators can fold updates eagerly and the top aggregator commits:
//   1. per arriving update, c_k = Coefficient(meta) from its metadata only;
//   2. leaves Fold(x_k, c_k, τ_k) into PartialSums; the top Merges them;
//   3. when ShouldCommit (or, for synchronous rounds and FedCompass groups, when the coordinator
//      or the scheduler says so), Commit(total, versions, state) makes version t + 1.
// Parameters are one struct per algorithm, defaults written once here; they become FLJob
// manifest fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "shoal/common/status.h"
#include "shoal/fl/algorithms/model_state.h"
#include "shoal/fl/algorithms/partial_sum.h"
#include "shoal/fl/algorithms/version_store.h"

namespace shoal::aggregator {

// What the coordinator knows about an update without reading its tensors.
struct UpdateMeta {
  uint64_t client_id = 0;
  double num_samples = 0;        // n_k
  uint64_t base_version = 0;     // τ_k: the version the client trained from
  uint64_t current_version = 0;  // t: the global version when the update is weighed
  double arrival_time = 0;       // seconds, the coordinator's clock
  // Σ n over the job's clients as the coordinator knows it now (FedFix's p_k when its
  // total_samples parameter is 0).
  double total_samples = 0;
};

// u = t − τ (0 if the base is somehow newer).
uint64_t Staleness(const UpdateMeta& meta);
// Polynomial staleness s(u) = (1 + u)^(−a); FedBuff's 1/√(1+u) is a = 0.5.
double PolynomialStaleness(uint64_t u, double a);

// ---- Parameters (defaults: the papers' / reference implementations') ----------------------------

struct FedAvgParams {
  Status Validate() const { return Status::Ok(); }
};

struct FedAvgMParams {
  double beta = 0.9;  // server momentum β
  double eta = 1.0;   // server learning rate η
  Status Validate() const;
};

struct FedAdamParams {
  double eta = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double tau = 1e-3;  // adaptivity ε in w ← w + η m / (√v + τ)
  Status Validate() const;
};

struct FedAsyncParams {
  double alpha = 0.9;
  double staleness_exponent = 0.5;  // a in s(u) = (1 + u)^(−a)
  Status Validate() const;
};

struct FedBuffParams {
  uint32_t buffer_size = 10;        // K
  double eta_g = 1.0;               // server learning rate
  double staleness_exponent = 0.5;  // s(u) = 1/√(1+u)
  Status Validate() const;
};

struct FedFixParams {
  double period_s = 10.0;  // Δt between server ticks (the paper leaves it to the user)
  // Σ n over all the job's clients: p_k = n_k / total_samples; 0 = take UpdateMeta's
  // total_samples (the coordinator's running count).
  double total_samples = 0;
  Status Validate() const;
};

struct FedCompassParams {
  double alpha = 0.9;
  double staleness_exponent = 0.5;
  uint32_t num_clients = 0;  // N in α_k = α · s(u_k) / N; must be set (≥ 1)
  // Scheduler (FedCompassScheduler).
  uint32_t q_max = 100;  // local steps
  uint32_t q_min = 20;
  double latest_time_factor = 1.5;  // λ: T_l = now + Q · speed · λ
  double speed_momentum = 0.9;      // m: speed ← (1 − m) speed + m · measured
  Status Validate() const;
};

// Every algorithm's parameters, for the factory (a manifest fills the one it names).
struct AlgorithmParams {
  FedAvgParams fedavg;
  FedAvgMParams fedavgm;
  FedAdamParams fedadam;
  FedAsyncParams fedasync;
  FedBuffParams fedbuff;
  FedFixParams fedfix;
  FedCompassParams fedcompass;
};

// ---- The interface ---------------------------------------------------------------------------

class AggregationAlgorithm {
 public:
  virtual ~AggregationAlgorithm() = default;

  virtual std::string_view name() const = 0;

  // True if Commit reads w_τ for the updates' base versions from the VersionStore (Δ-based);
  // the others only read the current model in ModelState.
  virtual bool needs_base_versions() const { return false; }

  // True if an update whose base version is not the current one is a protocol error (the
  // synchronous algorithms); the coordinator refuses it before folding.
  virtual bool synchronous() const { return false; }

  // The weight c_k of an arriving update, from its metadata only.
  virtual double Coefficient(const UpdateMeta& meta) const = 0;

  // True if the staleness part of c_k is the staleness when the update is aggregated, not when
  // it arrived (FedCompass: a group member, or a late update in the general buffer, waits for
  // its group). The leaves then fold Coefficient(meta with current_version = base_version) and
  // the top scales each base version's partial sum by CommitScale(t − τ) when it commits.
  virtual bool staleness_at_commit() const { return false; }
  virtual double CommitScale(uint64_t /*staleness*/) const { return 1.0; }

  // Whether to commit now with `buffered` updates folded since the last commit. Always false
  // for the synchronous algorithms (the coordinator ends a round on quorum or deadline) and for
  // FedCompass (the scheduler decides).
  virtual bool ShouldCommit(size_t buffered, double now) const = 0;

  // The next time ShouldCommit may turn true without another arrival (FedFix's tick), if any.
  virtual std::optional<double> NextCommitTime() const { return std::nullopt; }

  // Called once when the job starts (FedFix's ticks count from here) and after each Commit (or
  // tick that had nothing to commit) with the coordinator's time.
  virtual void Start(double /*now*/) {}
  virtual void OnCommitted(double /*now*/) {}

  // Applies the final step to state (weights, optimizer state, version + 1). `total` is the
  // merge of every leaf's PartialSum. On error the state is unchanged.
  virtual Status Commit(const PartialSum& total, const VersionStore& versions,
                        ModelState& state) = 0;
};

// ---- Implementations
// -----------------------------------------------------------------------------

// An algorithm and its parameters (MakeAlgorithm validates them before building it).
template <class Params>
class AlgorithmWith : public AggregationAlgorithm {
 public:
  explicit AlgorithmWith(Params p = {}) : p_(p) {}
  const Params& params() const { return p_; }

 protected:
  Params p_;
};

// The synchronous algorithms: a round's updates all train from the round's version, each
// weighted by its samples n_k; the coordinator ends the round (quorum or deadline), so
// ShouldCommit never does. They differ only in the server step Commit applies.
template <class Params>
class SynchronousAlgorithm : public AlgorithmWith<Params> {
 public:
  using AlgorithmWith<Params>::AlgorithmWith;
  bool synchronous() const final { return true; }
  double Coefficient(const UpdateMeta& meta) const final { return meta.num_samples; }
  bool ShouldCommit(size_t, double) const final { return false; }
};

// w ← Σ (n_k / Σ n) w_k.
class FedAvg final : public SynchronousAlgorithm<FedAvgParams> {
 public:
  using SynchronousAlgorithm::SynchronousAlgorithm;
  std::string_view name() const override { return "fedavg"; }
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;
};

// Δ = avg − w; v ← β v + Δ; w ← w + η v.
class FedAvgM final : public SynchronousAlgorithm<FedAvgMParams> {
 public:
  using SynchronousAlgorithm::SynchronousAlgorithm;
  std::string_view name() const override { return "fedavgm"; }
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;
};

// Δ = avg − w; m ← β1 m + (1−β1) Δ; v ← β2 v + (1−β2) Δ²; w ← w + η m / (√v + τ).
class FedAdam final : public SynchronousAlgorithm<FedAdamParams> {
 public:
  using SynchronousAlgorithm::SynchronousAlgorithm;
  std::string_view name() const override { return "fedadam"; }
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;
};

// Per arrival: α_t = α s(u_k); w ← (1 − α_t) w + α_t w_k. Commits after every update; if several
// were merged before a commit, w ← (1 − Σ α_k) w + Σ α_k w_k.
class FedAsync final : public AlgorithmWith<FedAsyncParams> {
 public:
  using AlgorithmWith::AlgorithmWith;
  std::string_view name() const override { return "fedasync"; }
  double Coefficient(const UpdateMeta& meta) const override;
  bool ShouldCommit(size_t buffered, double) const override { return buffered >= 1; }
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;
};

// Buffer K arrivals; w ← w + η_g (1/K) Σ s(u_k) Δ_k. A flush with fewer than K (end of job)
// divides by the number buffered.
class FedBuff final : public AlgorithmWith<FedBuffParams> {
 public:
  using AlgorithmWith::AlgorithmWith;
  std::string_view name() const override { return "fedbuff"; }
  bool needs_base_versions() const override { return true; }
  double Coefficient(const UpdateMeta& meta) const override;
  bool ShouldCommit(size_t buffered, double) const override { return buffered >= p_.buffer_size; }
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;
};

// Every Δt: w ← w + Σ_{k arrived} p_k Δ_k, p_k = n_k / total_samples. A tick with no arrivals
// changes nothing and makes no new version.
class FedFix final : public AlgorithmWith<FedFixParams> {
 public:
  using AlgorithmWith::AlgorithmWith;
  std::string_view name() const override { return "fedfix"; }
  bool needs_base_versions() const override { return true; }
  double Coefficient(const UpdateMeta& meta) const override;
  bool ShouldCommit(size_t buffered, double now) const override;
  std::optional<double> NextCommitTime() const override { return next_tick_; }
  void Start(double now) override;
  void OnCommitted(double now) override;
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;

 private:
  double origin_ = 0;
  std::optional<double> next_tick_;  // unset until Start
};

// FedCompass's aggregation: α_k = α s(u_k) / N; w ← w + Σ α_k Δ_k with Δ_k = w_k − w_{τ_k}
// (each update's progress from the version it trained from, as the authors' APPFL runs it:
// clients send gradients, `gradient_based: true`), for a client's first arrival alone and for a
// group (plus the general buffer). Mixing models instead, (1 − Σ α_k) w + Σ α_k w_k, would also
// pull the global model back towards each stale update's old base. When to commit is
// FedCompassScheduler's decision.
class FedCompass final : public AlgorithmWith<FedCompassParams> {
 public:
  using AlgorithmWith::AlgorithmWith;
  std::string_view name() const override { return "fedcompass"; }
  bool needs_base_versions() const override { return true; }
  double Coefficient(const UpdateMeta& meta) const override;
  bool staleness_at_commit() const override { return true; }
  double CommitScale(uint64_t staleness) const override;
  bool ShouldCommit(size_t, double) const override { return false; }
  Status Commit(const PartialSum& total, const VersionStore& versions, ModelState& state) override;
};

// "fedavg", "fedavgm", "fedadam", "fedasync", "fedbuff", "fedfix", "fedcompass": the named
// algorithm with its parameters from `params`, validated (the error names the parameter, e.g.
// "fedadam.beta2 must be in [0, 1) (got 1.2)"); kInvalidArgument for an unknown name.
Result<std::unique_ptr<AggregationAlgorithm>> MakeAlgorithm(std::string_view name,
                                                            const AlgorithmParams& params = {});

}  // namespace shoal::aggregator
