// spec.privacy.dp through FlCoordinator: updates admitted from a real shared-memory pool, each
// clipped at commit to C and noised once (the test seed SHOAL_DP_TEST_SEED makes the noise the
// test's to recompute). The committed model is the clipped mean plus exactly the noise drawn;
// one outlier moves it by exactly C/n (σ = 0); (ε, δ) per version is the accountant's; the budget
// stops the job before the version that would exceed it, saying so, also after a restart; the
// deploy refuses what cannot be accounted.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coordinator_fixture.h"
#include "shoal/common/log.h"
#include "shoal/common/payload.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/privacy/gaussian_noise.h"
#include "shoal/fl/privacy/rdp_accountant.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal {
namespace {

using Json = nlohmann::json;
constexpr int kClients = 5;
constexpr int kOutlier = 4;  // sends w0 - 100 everywhere
constexpr uint64_t kSeed = 424242;

class DpCommitTest : public coordinator_test::CoordinatorFixture {
 protected:
  void SetUp() override {
    setenv("SHOAL_DP_TEST_SEED", std::to_string(kSeed).c_str(), 1);
    MakeDirAndPool("shoal-dp-test");
    if (HasFatalFailure()) return;
    fl_ = std::make_unique<FlCoordinator>(config_);
  }
  void TearDown() override {
    unsetenv("SHOAL_DP_TEST_SEED");
    CoordinatorFixture::TearDown();
  }
  static FlJobSpec Spec(double sigma, double clip) {
    FlJobSpec spec = RbSpec(kClients);
    spec.rounds = 5;
    spec.privacy.dp.enabled = true;
    spec.privacy.dp.noise_multiplier = sigma;
    spec.privacy.dp.clip = clip;
    return spec;
  }
  // Client k's update from `base`: `base` plus small noise of its own; the outlier: base - 100.
  std::vector<float> X(int k, const std::vector<float>& base, bool outlier = true) {
    std::vector<float> x = base;
    std::mt19937 rng(100 + k);
    std::uniform_real_distribution<float> d(-1.0f / 16, 1.0f / 16);
    for (float& v : x) v += k == kOutlier && outlier ? -100.0f : d(rng);
    return x;
  }
  void Send(int k, const std::vector<float>& values, uint64_t base_version) {
    model::Model m(mspec_);
    m.values = values;
    model::UpdateMeta meta;
    meta.job = "rb";
    meta.client_id = clients_[k].client_id;
    meta.token = clients_[k].token;
    meta.base_version = base_version;
    meta.num_samples = 100 * (k + 1);
    auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
    ASSERT_TRUE(body.ok());
    auto b = WriteAsGateway(*body);
    ASSERT_TRUE(b.ok());
    auto adm = fl_->Admit("rb", *pool_, b->body, b->buffer);
    ASSERT_TRUE(adm.ok()) << adm.status().ToString();
    auto partial = fl_->PartialFor(adm->ticket, 7);
    ASSERT_TRUE(partial.ok()) << partial.status().ToString();
    EXPECT_EQ(*partial, 0u) << "a DP job's leaves fold into nothing";
    fl_->Completed(adm->ticket, 202, true);
    (void)pool_->Release(b->buffer, kShoaldSlot);
  }
  std::vector<float> Committed(uint64_t v) {
    auto m = fl_->Model("rb", v);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? Values(*m->bytes) : std::vector<float>{};
  }
  // w + (1/n) Σ_k clip_C(x_k - w), in double.
  static std::vector<double> ClippedMean(const std::vector<std::vector<float>>& xs,
                                         const std::vector<float>& w, double clip) {
    std::vector<double> out(w.begin(), w.end());
    for (const auto& x : xs) {
      double norm = 0;
      for (size_t j = 0; j < x.size(); ++j) norm += double(x[j] - w[j]) * (x[j] - w[j]);
      norm = std::sqrt(norm);
      const double c = norm > clip ? clip / norm : 1.0;
      for (size_t j = 0; j < x.size(); ++j) out[j] += c * (x[j] - w[j]) / double(xs.size());
    }
    return out;
  }
  // One round from `base` (version v - 1); waits for version v; returns the updates sent.
  std::vector<std::vector<float>> Round(uint64_t v, const std::vector<float>& base,
                                        bool outlier = true) {
    std::vector<std::vector<float>> xs;
    for (int k = 0; k < kClients; ++k) {
      xs.push_back(X(k, base, outlier));
      Send(k, xs.back(), v - 1);
    }
    EXPECT_TRUE(WaitVersion(v)) << Status().dump();
    return xs;
  }
};

// σ = 0 (no noise): the committed model is the unweighted mean of the clipped deltas, whatever
// the sample counts, and the outlier's delta (norm ~1760) moves it by exactly C/n: the committed
// model with the outlier and the mean of the four honest clipped deltas plus 0 differ by C/5.
TEST_F(DpCommitTest, ClippingBoundsEachUpdatesInfluenceExactly) {
  const double clip = 1.0;  // the honest deltas' norms are ~0.64: only the outlier is clipped
  DeployAndJoin(Spec(0.0, clip), kClients, "client-");
  const auto xs = Round(1, w0_);
  const std::vector<float> got = Committed(1);
  const std::vector<double> want = ClippedMean(xs, w0_, clip);
  double max_diff = 0;
  for (size_t j = 0; j < got.size(); ++j) max_diff = std::max(max_diff, std::abs(got[j] - want[j]));
  EXPECT_LT(max_diff, 1e-6);
  // The outlier replaced by an update equal to the base (its delta 0): the model without its
  // influence. The difference is the outlier's clipped delta over n: norm exactly C/n.
  std::vector<std::vector<float>> without = xs;
  without[kOutlier] = w0_;
  const std::vector<double> other = ClippedMean(without, w0_, clip);
  double d2 = 0;
  for (size_t j = 0; j < got.size(); ++j) d2 += (got[j] - other[j]) * (got[j] - other[j]);
  EXPECT_NEAR(std::sqrt(d2), clip / kClients, 1e-5);
  const Json st = Status();
  const Json& dp = st["privacy"]["dp"];
  EXPECT_EQ(dp["versions"][0].value("clipped", 9), 1) << dp.dump();
  EXPECT_EQ(dp["versions"][0].value("updates", 0), kClients);
  EXPECT_EQ(dp["versions"][0].value("noise_std", -1.0), 0.0);
  EXPECT_EQ(dp.value("epsilon", Json()).get<std::string>(), "inf");  // σ 0: no privacy
  for (const Json& c : st["clients"]["list"]) {
    EXPECT_EQ(c.value("clipped_updates", 9), c.value("name", "") == "client-4" ? 1 : 0);
    EXPECT_FALSE(c.contains("robust")) << "a DP job has no robust verdicts";
  }
  EXPECT_FALSE(st.contains("robust"));
}

// σ > 0: the committed model minus the clipped mean is exactly the noise the test seed draws,
// N(0, (σC/n)^2) per coordinate, and its sample standard deviation is σC/n.
TEST_F(DpCommitTest, NoiseIsAddedOnceWithStandardDeviationSigmaClipOverN) {
  const double sigma = 2.0, clip = 0.5, std_mean = sigma * clip / kClients;
  DeployAndJoin(Spec(sigma, clip), kClients, "client-");
  const auto xs = Round(1, w0_);
  const std::vector<float> got = Committed(1);
  const std::vector<double> mean = ClippedMean(xs, w0_, clip);
  privacy::GaussianNoise g = privacy::GaussianNoise::Seeded(kSeed);
  double max_diff = 0, sq = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    const double noise = std_mean * g.Normal();
    max_diff = std::max(max_diff, std::abs(got[j] - (mean[j] + noise)));
    sq += (got[j] - mean[j]) * (got[j] - mean[j]);
  }
  EXPECT_LT(max_diff, 2e-6);  // noise drawn once over the whole total, never per leaf
  const double n = static_cast<double>(got.size());
  const double z = (sq / n / (std_mean * std_mean) - 1) / std::sqrt(2 / n);
  EXPECT_LT(std::abs(z), 6.0) << "sample variance " << sq / n << " vs " << std_mean * std_mean;
  const Json v = Status()["privacy"]["dp"]["versions"][0];
  EXPECT_DOUBLE_EQ(v.value("noise_std", 0.0), std_mean);
  EXPECT_DOUBLE_EQ(v.value("sampling_rate", 0.0), 1.0);
}

// The accountant's (ε, δ) per version in the status; the budget set between ε after 2 and
// after 3 versions: version 3 is never committed, the job is done with the reason, and a
// restarted coordinator keeps the spend and the reason.
TEST_F(DpCommitTest, BudgetStopsTheJobBeforeTheVersionThatWouldExceedIt) {
  const double sigma = 1.5, delta = 1e-5;
  privacy::RdpAccountant acc;
  std::vector<double> eps;
  for (int i = 0; i < 3; ++i) {
    acc.Step(1.0, sigma);
    eps.push_back(acc.Spent(delta).epsilon);
  }
  FlJobSpec spec = Spec(sigma, 0.5);
  spec.privacy.dp.budget = (eps[1] + eps[2]) / 2;
  DeployAndJoin(spec, kClients, "client-");
  Round(1, w0_);
  Round(2, Committed(1));
  const std::vector<float> w2 = Committed(2);
  for (int k = 0; k < kClients; ++k) Send(k, X(k, w2), 2);
  Json st;
  for (int i = 0; i < 250; ++i) {
    st = Status();
    if (st.value("state", "") == "done") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(st.value("state", ""), "done") << st.dump();
  EXPECT_EQ(st.value("version", 0), 2);
  const Json& dp = st["privacy"]["dp"];
  ASSERT_EQ(dp["versions"].size(), 2u) << dp.dump();
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(dp["versions"][i].value("epsilon", 0.0), eps[i], 1e-12);
    EXPECT_EQ(dp["versions"][i].value("delta", 0.0), delta);
    EXPECT_NEAR(st["versions"][i + 1].value("epsilon", 0.0), eps[i], 1e-12);
  }
  EXPECT_NEAR(dp.value("epsilon", 0.0), eps[1], 1e-12);
  const std::string reason = st.value("reason", "");
  EXPECT_EQ(reason.rfind("privacy budget ε=" + fmt::format("{}", spec.privacy.dp.budget) +
                             " would be exceeded by version 3 (ε=" + fmt::format("{:.4f}", eps[2]),
                         0),
            0u)
      << reason;
  EXPECT_EQ(dp.value("stop_reason", ""), reason);
  // A done job refuses further updates.
  auto body = WriteAsGateway(std::vector<std::byte>(16));
  ASSERT_TRUE(body.ok());
  EXPECT_FALSE(fl_->Admit("rb", *pool_, body->body, body->buffer).ok());
  (void)pool_->Release(body->buffer, kShoaldSlot);
  // Restarted (the coordinator writes what is queued as it stops): the spend and the reason are
  // the checkpoint's, never reset.
  fl_.reset();
  fl_ = std::make_unique<FlCoordinator>(config_);
  ASSERT_TRUE(fl_->Restore().ok());
  const Json again = Status();
  EXPECT_EQ(again.value("state", ""), "done") << again.dump();
  EXPECT_EQ(again.value("reason", ""), reason);
  EXPECT_NEAR(again["privacy"]["dp"].value("epsilon", 0.0), eps[1], 1e-12);
}

// Adaptive clipping (σ 0, so the update gets no noise; the count's σ_b is drawn from the
// seed): C follows Andrew et al.'s geometric rule from the round's unclipped share (4 of 5).
TEST_F(DpCommitTest, AdaptiveClipFollowsTheUnclippedShare) {
  FlJobSpec spec = Spec(0.0, 100.0);  // every honest delta (norm ~0.6) and no outlier fits
  spec.privacy.dp.adaptive = true;
  spec.privacy.dp.target_quantile = 0.5;
  spec.privacy.dp.clip_learning_rate = 0.2;
  spec.privacy.dp.count_noise_multiplier = 0.5;
  DeployAndJoin(spec, kClients, "client-");
  Round(1, w0_);  // the outlier's norm ~1760 > 100: 4 of 5 unclipped
  privacy::GaussianNoise g = privacy::GaussianNoise::Seeded(kSeed);
  const double b = (4 + 0.5 * g.Normal()) / kClients;
  const Json dp = Status()["privacy"]["dp"];
  EXPECT_EQ(dp["clip"].value("mode", ""), "adaptive");
  EXPECT_DOUBLE_EQ(dp["clip"].value("current", 0.0), 100.0 * std::exp(-0.2 * (b - 0.5)));
  EXPECT_EQ(dp["versions"][0].value("clip", 0.0), 100.0);
}

// What cannot be accounted is refused at deploy, naming the field; nothing is deployed.
TEST_F(DpCommitTest, DeployRefusesNamingTheField) {
  FlJobSpec spec = Spec(1.0, 1.0);
  spec.algorithm = "fedbuff";
  EXPECT_EQ(fl_->DeployJob(spec).message().rfind("spec.privacy.dp: central DP clips", 0), 0u);
  spec = Spec(1.0, 1.0);
  spec.robust.rule = "median";
  EXPECT_EQ(fl_->DeployJob(spec).message().rfind("spec.privacy.dp: cannot run beside", 0), 0u);
  spec = Spec(1.0, -1.0);
  EXPECT_EQ(fl_->DeployJob(spec).message(), "spec.privacy.dp.clip.fixed: must be a number > 0");
  EXPECT_TRUE(fl_->ListJobs().empty());
  DeployAndJoin(Spec(1.0, 1.0), kClients, "client-");
  EXPECT_EQ(fl_->DeployJob(RbSpec(kClients)).message(),
            "spec.privacy.dp: job 'rb' exists with differential privacy (its spend is accounted "
            "from the first version); delete it first");
}

}  // namespace
}  // namespace shoal
