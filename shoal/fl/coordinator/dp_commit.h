// The central-DP commit of an FL job (spec.privacy.dp): like the robust path (robust_commit.h)
// the coordinator reads the round's updates where they sit in the job's pool, clips each one's
// change from the round's base model to L2 norm C (the robust library's clipped mean), adds
// Gaussian noise N(0, (σC)^2) to the sum once (as σC/n on the unweighted mean, the way Flower's
// server-side DP wrappers do), adapts C (Andrew et al. 2021) and accounts the version's (ε, δ)
// with the RDP accountant (shoal/fl/privacy). A version that would take ε past
// spec.privacy.dp.budget is not committed: the job stops, saying so.
//
// Why at the top and not in the leaves: the clip needs each update's norm against the base
// model, which the leaves (separate processes folding raw updates) do not hold; the noise must
// be added once to the whole round's sum, never per partial sum (that would multiply it).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/privacy/gaussian_noise.h"
#include "shoal/fl/privacy/rdp_accountant.h"
#include "shoal/interfaces/fljob_spec.h"

namespace shoal {

class RobustCommitter;

// A DP job's privacy state: kept in the job, saved in state.json (the accountant's runs, the
// clip and the per-version figures), so that a restart resumes the spend, never resets it.
struct DpState {
  struct Version {
    uint64_t version = 0;
    uint32_t updates = 0;  // n: updates in the round
    uint32_t joined = 0;   // clients joined then
    double q = 0;          // sampling rate accounted: n / joined
    double clip = 0;       // C the round's updates were clipped to
    uint32_t clipped = 0;  // updates whose norm exceeded C
    double noise_std = 0;  // the per-coordinate noise on the mean: σ_Δ C / n
    double epsilon = 0;    // ε spent up to and including this version, at the job's δ
    double order = 0;      // the RDP order that gave it
  };
  privacy::RdpAccountant accountant;
  std::optional<privacy::GaussianNoise> noise;
  double clip = 0;                // the next round's C
  std::vector<Version> versions;  // the latest kVersionHistory
  std::string stop_reason;        // set when the budget stopped the job
  static constexpr size_t kVersionHistory = 256;
};

// The job's DP state from its spec (noise from the CSPRNG; the environment variable
// SHOAL_DP_TEST_SEED fixes the seed, for tests only, and says so in the log).
Result<std::unique_ptr<DpState>> MakeDpState(const FlJobSpec& spec);

// One DP round's commit, in the commit's three steps (fl_commit.cc): DpTake under the job's lock
// (the sampling rate, the budget check), DpMerge without it (the clipped mean and the noise,
// into job.total; the commit thread alone draws from the job's generator), DpSwapIn under the
// lock again (the accountant, the version's figures, the next C, the clients' counts).
struct DpCommit {
  bool enabled = false;
  Status refused;        // the budget would be exceeded: nothing is committed, the job stops
  uint64_t version = 0;  // the version it commits
  uint32_t updates = 0, joined = 0;
  double q = 0;
  double clip = 0;          // C the round's updates are clipped to
  double sigma = 0;         // the job's σ (accounted)
  double sigma_update = 0;  // σ_Δ the update's noise takes (σ, or less with adaptive clipping)
  privacy::PrivacySpent after;  // (ε, order) once this version is committed
  // DpMerge's results.
  double noise_std = 0;
  double next_clip = 0;
  std::vector<bool> clipped;  // per update, in RoundTickets order
};

// `updates`: the round's acknowledged updates. Marks the job done, with the reason, where the
// version would exceed spec.privacy.dp.budget (DpCommit::refused).
DpCommit DpTake(FlCoordinator::JobState& job, size_t updates);
// The round's total for the algorithm's step, as RobustMerge's: the noised clipped mean folded
// with Σ c_k. `from`: the round's tickets; `weights`: the model they were trained from.
Status DpMerge(FlCoordinator::JobState& job, const std::vector<std::span<const std::byte>>& bodies,
               double coefficients, const std::vector<float>& weights, uint64_t version,
               RobustCommitter& committer, DpCommit* c);
// `clients`: the client of each update (RoundTickets order); `committed`: the version was.
void DpSwapIn(FlCoordinator::JobState& job, const DpCommit& c,
              const std::vector<std::string>& clients, bool committed);

// status.privacy.dp, and the state.json member (and back).
nlohmann::json DpStatusJson(const FlJobSpec& spec, const DpState& dp);
nlohmann::json DpStateJson(const DpState& dp);
void RestoreDpState(const nlohmann::json& j, DpState& dp);

}  // namespace shoal
