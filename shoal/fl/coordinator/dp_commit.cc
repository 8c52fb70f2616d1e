#include "shoal/fl/coordinator/dp_commit.h"

#include <cstdlib>
#include <string>

#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/privacy/adaptive_clip.h"
#include "shoal/fl/privacy/dp_spec_check.h"

namespace shoal {
using namespace coordinator_internal;  // NOLINT(google-build-using-namespace): this library's own

using JobState = FlCoordinator::JobState;

Result<std::unique_ptr<DpState>> MakeDpState(const FlJobSpec& spec) {
  auto dp = std::make_unique<DpState>();
  dp->clip = spec.privacy.dp.clip;
  if (const char* seed = std::getenv("SHOAL_DP_TEST_SEED"); seed != nullptr && *seed != '\0') {
    spdlog::warn(
        "fl job {}: SHOAL_DP_TEST_SEED is set: the DP noise is drawn from a fixed seed (tests "
        "only: anyone who knows the seed can remove the noise)",
        spec.name);
    dp->noise = privacy::GaussianNoise::Seeded(std::strtoull(seed, nullptr, 10));
  } else {
    auto noise = privacy::GaussianNoise::FromCsprng();
    if (!noise.ok()) return noise.status();
    dp->noise = std::move(*noise);
  }
  return dp;
}

DpCommit DpTake(JobState& job, size_t updates) {
  DpState& dp = *job.dp;
  const FlDpSpec& d = job.spec.privacy.dp;
  DpCommit c;
  c.enabled = true;
  if (!d.adaptive) dp.clip = d.clip;  // a re-deploy may change a fixed clip
  // The sampling rate the round really had: its updates among the clients that joined.
  const size_t joined = std::max(job.clients.size(), updates);
  c.version = job.version() + 1;
  c.updates = static_cast<uint32_t>(updates);
  c.joined = static_cast<uint32_t>(joined);
  c.q = joined == 0 ? 0 : static_cast<double>(updates) / static_cast<double>(joined);
  c.clip = dp.clip;
  c.sigma = d.noise_multiplier;
  c.sigma_update = d.adaptive ? privacy::UpdateNoiseMultiplier(
                                    d.noise_multiplier, privacy::CountNoiseMultiplier(job.spec))
                              : d.noise_multiplier;
  c.after = dp.accountant.SpentAfter(c.q, c.sigma, d.delta);
  if (d.budget > 0 && !(c.after.epsilon <= d.budget)) {
    dp.stop_reason = fmt::format(
        "privacy budget ε={} would be exceeded by version {} (ε={:.4f} at δ={}, sampling rate "
        "{:.4f}): the job stops at version {}",
        d.budget, c.version, c.after.epsilon, d.delta, c.q, job.version());
    job.done = true;
    spdlog::warn("fl job {}: {}", job.spec.name, dp.stop_reason);
    c.refused = ResourceExhausted(dp.stop_reason);
  }
  return c;
}

Status DpMerge(JobState& job, const std::vector<std::span<const std::byte>>& bodies,
               double coefficients, const std::vector<float>& weights, uint64_t version,
               RobustCommitter& committer, DpCommit* c) {
  if (!c->refused.ok()) return c->refused;
  const size_t n = bodies.size();
  if (n == 0) return InvalidArgument("dp commit: no updates");
  const FlDpSpec& d = job.spec.privacy.dp;
  // Each delta from the round's base model clipped to C, their unweighted mean.
  FlRobustSpec clip;
  clip.clip_norm = c->clip;
  job.robust_out.resize(job.mspec.num_params());
  auto outcome =
      committer.Aggregate(clip, job.mspec, weights.data(), bodies, job.robust_out.data());
  if (!outcome.ok()) return outcome.status();
  // The noise, once, on the round's total: N(0, (σ_Δ C)^2) on the sum is σ_Δ C / n on the mean.
  c->noise_std = c->sigma_update * c->clip / static_cast<double>(n);
  job.dp->noise->Add(job.robust_out.data(), job.robust_out.size(), c->noise_std);
  c->clipped.clear();
  size_t unclipped = 0;
  for (const RobustVerdict& v : outcome->updates) {
    c->clipped.push_back(v.clipped);
    unclipped += v.clipped ? 0 : 1;
  }
  // Adaptive clipping: the server sees each update's norm when it clips it, so the bit
  // [norm <= C] is taken here instead of being sent (noised) by each client.
  c->next_clip = c->clip;
  if (d.adaptive) {
    c->next_clip =
        privacy::NextAdaptiveClip(c->clip, unclipped, n, d.target_quantile, d.clip_learning_rate,
                                  privacy::CountNoiseMultiplier(job.spec), *job.dp->noise)
            .next_clip;
  }
  job.total.Reset();
  return job.total.Fold(job.robust_out, coefficients, version);
}

void DpSwapIn(JobState& job, const DpCommit& c, const std::vector<std::string>& clients,
              bool committed) {
  if (!committed) return;
  DpState& dp = *job.dp;
  DpState::Version rec;
  rec.version = c.version;
  rec.updates = c.updates;
  rec.joined = c.joined;
  rec.q = c.q;
  rec.clip = c.clip;
  rec.noise_std = c.noise_std;
  rec.epsilon = c.after.epsilon;
  rec.order = c.after.order;
  for (size_t i = 0; i < c.clipped.size() && i < clients.size(); ++i) {
    if (!c.clipped[i]) continue;
    ++rec.clipped;
    JobState::Client& cl = job.clients[clients[i]];
    ++cl.clipped_updates;
    job.Changed(cl);
  }
  dp.clip = c.next_clip;
  dp.accountant.Step(c.q, c.sigma);
  dp.versions.push_back(rec);
  if (dp.versions.size() > DpState::kVersionHistory) dp.versions.erase(dp.versions.begin());
}

namespace {
Json EpsilonJson(double eps) { return std::isfinite(eps) ? Json(eps) : Json("inf"); }
}  // namespace

Json DpStatusJson(const FlJobSpec& spec, const DpState& dp) {
  const FlDpSpec& d = spec.privacy.dp;
  const privacy::PrivacySpent spent = dp.accountant.Spent(d.delta);
  Json versions = Json::array();
  for (const DpState::Version& v : dp.versions) {
    versions.push_back({{"version", v.version},
                        {"epsilon", EpsilonJson(v.epsilon)},
                        {"delta", d.delta},
                        {"order", v.order},
                        {"sampling_rate", v.q},
                        {"updates", v.updates},
                        {"joined", v.joined},
                        {"clip", v.clip},
                        {"clipped", v.clipped},
                        {"noise_std", v.noise_std}});
  }
  return {{"noise_multiplier", d.noise_multiplier},
          {"clip", {{"mode", d.adaptive ? "adaptive" : "fixed"}, {"current", dp.clip}}},
          {"delta", d.delta},
          {"budget", d.budget > 0 ? Json(d.budget) : Json(nullptr)},
          {"epsilon", EpsilonJson(spent.epsilon)},
          {"accountant", "rdp"},
          {"stop_reason", dp.stop_reason.empty() ? Json(nullptr) : Json(dp.stop_reason)},
          {"versions", std::move(versions)}};
}

Json DpStateJson(const DpState& dp) {
  Json runs = Json::array();
  for (const auto& r : dp.accountant.runs()) runs.push_back({r.q, r.sigma, r.steps});
  Json versions = Json::array();
  for (const DpState::Version& v : dp.versions) {
    versions.push_back({v.version, v.updates, v.joined, v.q, v.clip, v.clipped, v.noise_std,
                        EpsilonJson(v.epsilon), v.order});
  }
  return {{"runs", std::move(runs)},
          {"clip", dp.clip},
          {"versions", std::move(versions)},
          {"stop_reason", dp.stop_reason}};
}

void RestoreDpState(const Json& j, DpState& dp) {
  std::vector<privacy::RdpAccountant::Run> runs;
  for (const Json& r : j.value("runs", Json::array())) {
    runs.push_back({r.at(0).get<double>(), r.at(1).get<double>(), r.at(2).get<uint64_t>()});
  }
  dp.accountant.Restore(std::move(runs));
  dp.clip = j.value("clip", dp.clip);
  dp.versions.clear();
  for (const Json& v : j.value("versions", Json::array())) {
    DpState::Version r;
    r.version = v.at(0).get<uint64_t>();
    r.updates = v.at(1).get<uint32_t>();
    r.joined = v.at(2).get<uint32_t>();
    r.q = v.at(3).get<double>();
    r.clip = v.at(4).get<double>();
    r.clipped = v.at(5).get<uint32_t>();
    r.noise_std = v.at(6).get<double>();
    r.epsilon = v.at(7).is_number() ? v.at(7).get<double>() : HUGE_VAL;
    r.order = v.at(8).get<double>();
    dp.versions.push_back(r);
  }
  dp.stop_reason = j.value("stop_reason", std::string());
}

std::string FlCoordinator::PrivacyMetricsText() {
  std::vector<std::pair<std::string, std::shared_ptr<JobState>>> jobs;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, j] : jobs_) jobs.emplace_back(name, j);
  }
  std::string eps, delta, clip, budget;
  auto value = [](double v) {
    return std::isinf(v) ? std::string(v > 0 ? "+Inf" : "-Inf") : fmt::format("{}", v);
  };
  for (const auto& [name, job] : jobs) {
    std::lock_guard jl(job->mu);
    if (job->deleted || !job->dp) continue;
    const FlDpSpec& d = job->spec.privacy.dp;
    const std::string label = "{job=\"" + name + "\"} ";
    eps += "shoal_fl_dp_epsilon" + label + value(job->dp->accountant.Spent(d.delta).epsilon) + "\n";
    delta += "shoal_fl_dp_delta" + label + value(d.delta) + "\n";
    clip += "shoal_fl_dp_clip" + label + value(job->dp->clip) + "\n";
    if (d.budget > 0) budget += "shoal_fl_dp_budget" + label + value(d.budget) + "\n";
  }
  if (eps.empty()) return {};
  std::string out =
      "# HELP shoal_fl_dp_epsilon Privacy spent by a DP FL job (spec.privacy.dp) up to its latest "
      "version: ε at its δ (RDP accountant)\n# TYPE shoal_fl_dp_epsilon gauge\n" +
      eps +
      "# HELP shoal_fl_dp_delta The δ a DP FL job's ε is reported at\n"
      "# TYPE shoal_fl_dp_delta gauge\n" +
      delta +
      "# HELP shoal_fl_dp_clip The clip norm C of a DP FL job's next round\n"
      "# TYPE shoal_fl_dp_clip gauge\n" +
      clip;
  if (!budget.empty()) {
    out +=
        "# HELP shoal_fl_dp_budget The ε a DP FL job may spend (spec.privacy.dp.budget)\n"
        "# TYPE shoal_fl_dp_budget gauge\n" +
        budget;
  }
  return out;
}

}  // namespace shoal
