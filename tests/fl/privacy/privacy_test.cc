// shoal_fl_privacy: the Gaussian noise's standard deviation and mean (a million draws, a fixed
// test seed, bounds no seed could plausibly miss: 6 standard errors), the CSPRNG seeding (two
// generators differ), the RDP accountant against closed forms and Opacus's documented example,
// adaptive clipping's update and noise split, and the spec's checks naming their field.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "shoal/fl/privacy/adaptive_clip.h"
#include "shoal/fl/privacy/dp_spec_check.h"
#include "shoal/fl/privacy/gaussian_noise.h"
#include "shoal/fl/privacy/local_dp.h"
#include "shoal/fl/privacy/rdp_accountant.h"

namespace shoal::privacy {
namespace {

// (N - 1) s^2 / σ^2 ~ χ²(N - 1): for N = 10^6 its standard deviation over N - 1 is sqrt(2/(N-1)),
// so s^2/σ^2 within 1 ± 6·0.0014; the mean within 6 σ/sqrt(N).
void ExpectStddev(GaussianNoise& g, double stddev, size_t n = 1000000) {
  std::vector<float> x(n, 0.0f);
  g.Add(x.data(), n, stddev);
  double sum = 0, sq = 0;
  for (float v : x) sum += v;
  const double mean = sum / static_cast<double>(n);
  for (float v : x) sq += (v - mean) * (v - mean);
  const double var = sq / static_cast<double>(n - 1);
  const double z_var = (var / (stddev * stddev) - 1) / std::sqrt(2.0 / static_cast<double>(n - 1));
  const double z_mean = mean / (stddev / std::sqrt(static_cast<double>(n)));
  EXPECT_LT(std::abs(z_var), 6.0) << "variance " << var << " vs " << stddev * stddev;
  EXPECT_LT(std::abs(z_mean), 6.0) << "mean " << mean;
  // The tails are Gaussian: the share beyond 2σ is 4.55 %, within 6 standard errors.
  size_t beyond = 0;
  for (float v : x) beyond += std::abs(v - mean) > 2 * stddev ? 1 : 0;
  const double p = 0.0455002638963584, share = static_cast<double>(beyond) / static_cast<double>(n);
  EXPECT_LT(std::abs(share - p), 6 * std::sqrt(p * (1 - p) / static_cast<double>(n))) << share;
}

TEST(GaussianNoise, StandardDeviationMatchesSigmaTimesClip) {
  GaussianNoise g = GaussianNoise::Seeded(20261129);
  const double sigma = 1.1, clip = 0.5;
  ExpectStddev(g, sigma * clip);
  ExpectStddev(g, sigma * clip / 16);  // σC/n for a 16-client round
}

TEST(LocalDp, ClipsTheChangeToCAndLeavesASmallerOneAlone) {
  GaussianNoise g = GaussianNoise::Seeded(7);
  const std::vector<float> global = {1.0f, -2.0f, 0.5f, 0.0f};
  std::vector<float> trained = {4.0f, 2.0f, 0.5f, 0.0f};  // change (3, 4, 0, 0): norm 5
  auto norm = PrivatizeUpdate(global, trained, {0.5, 0.0}, g);
  ASSERT_TRUE(norm.ok());
  EXPECT_DOUBLE_EQ(*norm, 5.0);
  // Scaled by 0.5 / 5: the change becomes (0.3, 0.4, 0, 0).
  EXPECT_FLOAT_EQ(trained[0], 1.3f);
  EXPECT_FLOAT_EQ(trained[1], -1.6f);
  EXPECT_FLOAT_EQ(trained[2], 0.5f);
  EXPECT_FLOAT_EQ(trained[3], 0.0f);
  std::vector<float> small = {1.1f, -2.0f, 0.5f, 0.0f};
  ASSERT_TRUE(PrivatizeUpdate(global, small, {0.5, 0.0}, g).ok());
  EXPECT_FLOAT_EQ(small[0], 1.1f);
  std::vector<float> shorter = {1.0f};
  EXPECT_EQ(PrivatizeUpdate(global, shorter, {0.5, 0.0}, g).status().message(),
            "local DP: the update has 1 values, the global model 4");
}

TEST(LocalDp, NoiseIsSigmaTimesClipPerValue) {
  GaussianNoise g = GaussianNoise::Seeded(11);
  const size_t n = 1000000;
  const std::vector<float> global(n, 0.0f);
  std::vector<float> trained(n, 0.0f);  // no change: what is sent is the noise alone
  ASSERT_TRUE(PrivatizeUpdate(global, trained, {0.2, 1.5}, g).ok());
  double sq = 0;
  for (float v : trained) sq += double(v) * double(v);
  const double var = sq / static_cast<double>(n), want = 0.3 * 0.3;
  EXPECT_LT(std::abs(var / want - 1) / std::sqrt(2.0 / static_cast<double>(n)), 6.0) << var;
}

TEST(LocalDp, OptionsAreCheckedNamingTheFlag) {
  EXPECT_EQ(CheckLocalDp({0, 1}, "--local-dp-").message(),
            "--local-dp-clip: must be a finite number > 0, got 0.000000");
  EXPECT_EQ(CheckLocalDp({1, -1}, "--local-dp-").message(),
            "--local-dp-noise: must be a finite number >= 0, got -1.000000");
  EXPECT_TRUE(CheckLocalDp({1, 0}, "--local-dp-").ok());
}

TEST(GaussianNoise, CsprngSeededGeneratorsDrawDifferentNoise) {
  auto a = GaussianNoise::FromCsprng();
  auto b = GaussianNoise::FromCsprng();
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> x(64, 0.0f), y(64, 0.0f);
  a->Add(x.data(), x.size(), 1.0);
  b->Add(y.data(), y.size(), 1.0);
  EXPECT_NE(x, y);
  ExpectStddev(*a, 2.0);
  // The test seed is reproducible (the coordinator tests rely on it), and zero noise adds none.
  GaussianNoise s1 = GaussianNoise::Seeded(7), s2 = GaussianNoise::Seeded(7);
  EXPECT_EQ(s1.Normal(), s2.Normal());
  std::vector<float> z(8, 1.5f);
  s1.Add(z.data(), z.size(), 0.0);
  EXPECT_EQ(z, std::vector<float>(8, 1.5f));
}

// q = 1: no amplification, RDP α/(2σ²) per step; ε = min over the orders of the conversion.
TEST(RdpAccountant, FullParticipationIsTheGaussianMechanismsClosedForm) {
  const double sigma = 1.3, delta = 1e-5;
  RdpAccountant acc;
  for (int i = 0; i < 10; ++i) acc.Step(1.0, sigma);
  double best = INFINITY;
  for (double a : DefaultRdpOrders()) {
    const double rdp = 10 * a / (2 * sigma * sigma);
    best = std::min(best, rdp - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a));
  }
  EXPECT_NEAR(acc.Spent(delta).epsilon, best, 1e-12);
  ASSERT_EQ(acc.runs().size(), 1u);
  EXPECT_EQ(acc.runs()[0].steps, 10u);
  EXPECT_EQ(DefaultRdpOrders().size(), 99u + 52u);
  EXPECT_DOUBLE_EQ(DefaultRdpOrders().front(), 1.1);
  EXPECT_DOUBLE_EQ(DefaultRdpOrders().back(), 63);
}

// Opacus's docstring example (opacus/accountants/analysis/rdp.py): orders 2..32, two runs,
// δ 1e-5: ε 0.336 at order 23.
TEST(RdpAccountant, OpacusDocumentedExample) {
  std::vector<double> orders;
  for (int a = 2; a <= 32; ++a) orders.push_back(a);
  std::vector<double> rdp(orders.size(), 0.0);
  for (size_t i = 0; i < orders.size(); ++i) {
    rdp[i] = 10 * SampledGaussianRdp(1e-5, 1.0, orders[i]) +
             4 * SampledGaussianRdp(1e-4, 3.0, orders[i]);
  }
  const PrivacySpent s = RdpToEpsilon(orders, rdp, 1e-5);
  EXPECT_NEAR(s.epsilon, 0.336, 5e-4);
  EXPECT_EQ(s.order, 23);
}

TEST(RdpAccountant, EdgeCasesAndSpentAfter) {
  EXPECT_EQ(SampledGaussianRdp(0, 1, 2), 0);
  EXPECT_TRUE(std::isinf(SampledGaussianRdp(0.5, 0, 2)));
  RdpAccountant acc;
  EXPECT_EQ(acc.Spent(1e-5).epsilon, 0);
  acc.Step(0.5, 1.0);
  const double after = acc.SpentAfter(0.25, 1.0, 1e-5).epsilon;
  EXPECT_EQ(acc.runs().size(), 1u);  // SpentAfter changes nothing
  acc.Step(0.25, 1.0);
  EXPECT_EQ(acc.Spent(1e-5).epsilon, after);
  EXPECT_GT(after, 0);
  RdpAccountant none;
  none.Step(1.0, 0.0);
  EXPECT_TRUE(std::isinf(none.Spent(1e-5).epsilon));
}

// Andrew et al.: C <- C exp(-η (b - γ)); no count noise: b is the exact unclipped share.
TEST(AdaptiveClip, GeometricUpdateTowardsTheTargetQuantile) {
  GaussianNoise g = GaussianNoise::Seeded(1);
  auto u = NextAdaptiveClip(2.0, 12, 16, 0.5, 0.2, 0.0, g);
  EXPECT_DOUBLE_EQ(u.unclipped_fraction, 0.75);
  EXPECT_DOUBLE_EQ(u.next_clip, 2.0 * std::exp(-0.2 * 0.25));  // too many unclipped: C shrinks
  u = NextAdaptiveClip(2.0, 2, 16, 0.5, 0.2, 0.0, g);
  EXPECT_GT(u.next_clip, 2.0);
  // With σ_b: the count's noise is the generator's next draw.
  GaussianNoise a = GaussianNoise::Seeded(9), b = GaussianNoise::Seeded(9);
  u = NextAdaptiveClip(1.0, 8, 16, 0.5, 0.2, 0.8, a);
  EXPECT_DOUBLE_EQ(u.unclipped_fraction, (8 + 0.8 * b.Normal()) / 16);
  // σ_Δ = (σ^-2 - (2σ_b)^-2)^(-1/2): σ 1, σ_b 0.8 -> 1/sqrt(1 - 1/2.56).
  EXPECT_DOUBLE_EQ(UpdateNoiseMultiplier(1.0, 0.8), 1 / std::sqrt(1 - 1 / 2.56));
  EXPECT_EQ(UpdateNoiseMultiplier(0.0, 0.8), 0.0);
  EXPECT_DOUBLE_EQ(DefaultCountNoiseMultiplier(16), 0.8);
}

FlJobSpec DpSpec() {
  FlJobSpec s;
  s.algorithm = "fedavg";
  s.clients = 16;
  s.privacy.dp.enabled = true;
  s.privacy.dp.noise_multiplier = 1.0;
  s.privacy.dp.clip = 1.0;
  return s;
}

TEST(CheckDpSpec, RefusesWhatCannotBeAccountedNamingTheField) {
  EXPECT_TRUE(CheckDpSpec(DpSpec(), true).ok());
  FlJobSpec s = DpSpec();
  s.algorithm = "fedbuff";
  Status st = CheckDpSpec(s, false);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("spec.privacy.dp: central DP clips"), std::string::npos);
  EXPECT_NE(st.message().find("algorithm fedbuff mixes base versions"), std::string::npos);
  s = DpSpec();
  s.robust.rule = "median";
  EXPECT_NE(CheckDpSpec(s, true).message().find("beside spec.aggregation.robust"),
            std::string::npos);
  s = DpSpec();
  s.privacy.dp.delta = 1;
  EXPECT_EQ(CheckDpSpec(s, true).message(), "spec.privacy.dp.delta: must be > 0 and < 1");
  s = DpSpec();
  s.privacy.dp.clip = 0;
  EXPECT_EQ(CheckDpSpec(s, true).message(), "spec.privacy.dp.clip.fixed: must be a number > 0");
  // Adaptive: 16 clients -> σ_b 0.8 by default, so σ 1.6 leaves nothing for the update.
  s = DpSpec();
  s.privacy.dp.adaptive = true;
  s.privacy.dp.noise_multiplier = 1.6;
  EXPECT_EQ(CheckDpSpec(s, true).message(),
            "spec.privacy.dp.clip.adaptive.countNoiseMultiplier: the count's noise σ_b = 0.8 "
            "(spec.clients.expected / 20) must exceed noiseMultiplier / 2 = 0.8, else it spends "
            "the whole budget and leaves no noise for the update");
  s.privacy.dp.count_noise_multiplier = 2;
  EXPECT_TRUE(CheckDpSpec(s, true).ok());
  EXPECT_DOUBLE_EQ(CountNoiseMultiplier(s), 2);
}

}  // namespace
}  // namespace shoal::privacy
