// Each algorithm against a worked example (3 clients, 4 parameters) computed by hand from the
// formulas in FL-ALGORITHMS.md, plus parameters, staleness, versions and checkpoints.
#include "shoal/fl/algorithms/algorithms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "shoal/fl/algorithms/partial_sum.h"
#include "shoal/fl/kernels/fold_pool.h"

namespace shoal::aggregator {
namespace {

using Vec = std::vector<float>;

void ExpectNear(const Vec& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

// The example: global w = {1,2,3,4}; three clients' local models and sample counts.
const Vec kW0 = {1, 2, 3, 4};
const Vec kW1 = {2, 2, 2, 2};  // n = 1
const Vec kW2 = {0, 4, 6, 8};  // n = 2
const Vec kW3 = {4, 0, 3, 0};  // n = 1

struct Update {
  const Vec* x;
  double n;
  uint64_t base;
};

PartialSum FoldAll(const AggregationAlgorithm& algo, const std::vector<Update>& ups,
                   uint64_t current) {
  PartialSum ps;
  for (const auto& u : ups) {
    UpdateMeta m{0, u.n, u.base, current, 0};
    EXPECT_TRUE(ps.Fold(*u.x, algo.Coefficient(m), u.base).ok());
  }
  return ps;
}

ModelState State(Vec w, uint64_t version) {
  ModelState s;
  s.weights = std::move(w);
  s.version = version;
  return s;
}

TEST(FedAvg, WeightedBySampleCount) {
  FedAvg algo;
  VersionStore versions(0);
  ModelState s = State(kW0, 0);
  auto ps = FoldAll(algo, {{&kW1, 1, 0}, {&kW2, 2, 0}, {&kW3, 1, 0}}, 0);
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  // (w1 + 2 w2 + w3) / 4 = {6, 10, 17, 18} / 4
  ExpectNear(s.weights, {1.5, 2.5, 4.25, 4.5});
  EXPECT_EQ(s.version, 1u);
}

TEST(FedAvgM, MomentumCarriesToTheNextRound) {
  FedAvgM algo;  // β = 0.9, η = 1
  VersionStore versions(0);
  ModelState s = State(kW0, 0);
  auto ps = FoldAll(algo, {{&kW1, 1, 0}, {&kW2, 2, 0}, {&kW3, 1, 0}}, 0);
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  // Δ = avg − w = {0.5, 0.5, 1.25, 0.5}; v = Δ; w = w + v = avg.
  ExpectNear(s.momentum, {0.5, 0.5, 1.25, 0.5});
  ExpectNear(s.weights, {1.5, 2.5, 4.25, 4.5});
  // Same clients again: Δ = 0, v = 0.9 v, w = avg + 0.9 {0.5, 0.5, 1.25, 0.5}.
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  ExpectNear(s.momentum, {0.45, 0.45, 1.125, 0.45});
  ExpectNear(s.weights, {1.95, 2.95, 5.375, 4.95});
  EXPECT_EQ(s.version, 2u);
}

// A model large enough for the step to run on every core: every parameter stepped once, with
// the one-thread formulas' exact bits (FedAvgM twice, so a parameter stepped twice or not at
// all shows in its momentum; FedAdam's square root too).
TEST(SyncCommit, ALargeModelsStepIsTheOneThreadStepOnEveryParameter) {
  constexpr size_t kN = 300'001;
  Vec w0(kN), a(kN), b(kN);
  for (size_t i = 0; i < kN; ++i) {
    w0[i] = static_cast<float>(std::cos(0.01 * static_cast<double>(i)));
    a[i] = static_cast<float>(std::sin(0.003 * static_cast<double>(i)));
    b[i] = static_cast<float>(i % 1000) * 0.001f - 0.5f;
  }
  PartialSum ps;
  ASSERT_TRUE(ps.Fold(a, 1.0, 0).ok());
  ASSERT_TRUE(ps.Fold(b, 3.0, 0).ok());
  const double inv = 1.0 / ps.weight();
  VersionStore versions(0);
  FedAvgM avgm;  // β = 0.9, η = 1
  ModelState s = State(w0, 0);
  Vec w = w0, v(kN, 0.0f);
  for (int commit = 0; commit < 2; ++commit) {
    ASSERT_TRUE(avgm.Commit(ps, versions, s).ok());
    for (size_t i = 0; i < kN; ++i) {
      const double delta = static_cast<double>(ps.sum()[i]) * inv - w[i];
      const double vi = 0.9 * v[i] + delta;
      v[i] = static_cast<float>(vi);
      w[i] = static_cast<float>(w[i] + 1.0 * vi);
    }
    ASSERT_EQ(0, std::memcmp(s.momentum.data(), v.data(), kN * 4)) << "commit " << commit;
    ASSERT_EQ(0, std::memcmp(s.weights.data(), w.data(), kN * 4)) << "commit " << commit;
  }
  EXPECT_EQ(s.version, 2u);
  FedAdam adam;  // η = 0.1, β1 = 0.9, β2 = 0.99, τ = 1e-3
  ModelState t = State(w0, 0);
  ASSERT_TRUE(adam.Commit(ps, versions, t).ok());
  for (size_t i = 0; i < kN; ++i) {
    const double delta = static_cast<double>(ps.sum()[i]) * inv - w0[i];
    const double m = 0.9 * 0.0 + (1 - 0.9) * delta, sq = 0.99 * 0.0 + (1 - 0.99) * delta * delta;
    ASSERT_EQ(t.momentum[i], static_cast<float>(m)) << i;
    ASSERT_EQ(t.second_moment[i], static_cast<float>(sq)) << i;
    ASSERT_EQ(t.weights[i], static_cast<float>(w0[i] + 0.1 * m / (std::sqrt(sq) + 1e-3))) << i;
  }
}

TEST(FedAdam, OneStepFromZeroMoments) {
  FedAdam algo;  // η = 0.1, β1 = 0.9, β2 = 0.99, τ = 1e-3
  VersionStore versions(0);
  ModelState s = State(kW0, 0);
  auto ps = FoldAll(algo, {{&kW1, 1, 0}, {&kW2, 2, 0}, {&kW3, 1, 0}}, 0);
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  // Δ = {0.5, 0.5, 1.25, 0.5}; m = 0.1 Δ; v = 0.01 Δ²; √v = 0.1 |Δ|;
  // w += 0.1 · 0.1Δ / (0.1|Δ| + 0.001).
  ExpectNear(s.momentum, {0.05, 0.05, 0.125, 0.05});
  ExpectNear(s.second_moment, {0.0025, 0.0025, 0.015625, 0.0025}, 1e-8);
  const double small = 0.1 * 0.05 / 0.051, big = 0.1 * 0.125 / 0.126;
  ExpectNear(s.weights, {1 + small, 2 + small, 3 + big, 4 + small});
}

TEST(FedAsync, MixesOneUpdateWithStalenessDecay) {
  FedAsync algo;  // α = 0.9, a = 0.5
  VersionStore versions(0);
  ModelState s = State(kW0, 3);
  // u = 3 − 0 = 3: s = 4^−0.5 = 0.5, α_t = 0.45.
  auto ps = FoldAll(algo, {{&kW1, 7, 0}}, 3);
  EXPECT_NEAR(ps.weight(), 0.45, 1e-12);
  EXPECT_TRUE(algo.ShouldCommit(1, 0));
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  ExpectNear(s.weights, {0.55 * 1 + 0.45 * 2, 0.55 * 2 + 0.9, 0.55 * 3 + 0.9, 0.55 * 4 + 0.9});
  EXPECT_EQ(s.version, 4u);
}

// Versions kept for the Δ-based examples: w_0 = 0, w_1 = 1, w_2 = kW0 (current).
VersionStore ThreeVersions() {
  VersionStore v(5);
  EXPECT_TRUE(v.Put(0, Vec{0, 0, 0, 0}).ok());
  EXPECT_TRUE(v.Put(1, Vec{1, 1, 1, 1}).ok());
  EXPECT_TRUE(v.Put(2, kW0).ok());
  return v;
}

TEST(FedBuff, StalenessWeightedDeltasFromTheirBaseVersions) {
  FedBuffParams p;
  p.buffer_size = 3;
  FedBuff algo(p);
  VersionStore versions = ThreeVersions();
  ModelState s = State(kW0, 2);
  // Client 1 from v2 (u=0, s=1): Δ = {1,0,−1,−2}; client 2 from v1 (u=1, s=1/√2):
  // Δ = {−1,3,5,7}; client 3 from v0 (u=2, s=1/√3): Δ = {4,0,3,0}.
  auto ps = FoldAll(algo, {{&kW1, 1, 2}, {&kW2, 2, 1}, {&kW3, 1, 0}}, 2);
  EXPECT_FALSE(algo.ShouldCommit(2, 0));
  EXPECT_TRUE(algo.ShouldCommit(3, 0));
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  const double r2 = 1 / std::sqrt(2.0), r3 = 1 / std::sqrt(3.0);
  ExpectNear(s.weights, {1 + (1 - r2 + 4 * r3) / 3, 2 + (3 * r2) / 3,
                         3 + (-1 + 5 * r2 + 3 * r3) / 3, 4 + (-2 + 7 * r2) / 3});
  EXPECT_EQ(s.version, 3u);
}

TEST(FedBuff, CommitsAtK) {
  FedBuff algo;  // K = 10
  for (size_t k = 0; k < 10; ++k) EXPECT_FALSE(algo.ShouldCommit(k, 1e9)) << k;
  EXPECT_TRUE(algo.ShouldCommit(10, 0));
}

TEST(FedFix, DataShareWeightedDeltasAtEachTick) {
  FedFixParams p;
  p.period_s = 10;
  p.total_samples = 8;  // a fourth client with 4 samples has not arrived this tick
  FedFix algo(p);
  algo.Start(100);
  EXPECT_EQ(algo.NextCommitTime(), 110.0);
  EXPECT_FALSE(algo.ShouldCommit(3, 109.9));
  EXPECT_TRUE(algo.ShouldCommit(3, 110));
  VersionStore versions = ThreeVersions();
  ModelState s = State(kW0, 2);
  auto ps = FoldAll(algo, {{&kW1, 1, 2}, {&kW2, 2, 1}, {&kW3, 1, 0}}, 2);
  ASSERT_TRUE(algo.Commit(ps, versions, s).ok());
  // p = {1/8, 2/8, 1/8}: Σ p Δ = {3/8, 6/8, 12/8, 12/8}.
  ExpectNear(s.weights, {1.375, 2.75, 4.5, 5.5});
  EXPECT_EQ(s.version, 3u);
  algo.OnCommitted(110);
  EXPECT_EQ(algo.NextCommitTime(), 120.0);
  // A tick with nobody arrived: no new version; a late coordinator skips missed ticks.
  PartialSum empty;
  ASSERT_TRUE(algo.Commit(empty, versions, s).ok());
  EXPECT_EQ(s.version, 3u);
  algo.OnCommitted(135);
  EXPECT_EQ(algo.NextCommitTime(), 140.0);
}

// FedCompass applies each update's own progress, Δ_k = w_k − w_{τ_k} (APPFL's FedCompass runs
// with clients sending gradients): w ← w + Σ α_k Δ_k, α_k = α s(u_k) / N.
// FedCompass over three clients, its other parameters the defaults.
FedCompassParams ThreeClients() {
  FedCompassParams p;
  p.num_clients = 3;
  return p;
}

TEST(FedCompass, GroupAndSingleUpdate) {
  FedCompass algo(ThreeClients());
  ASSERT_TRUE(algo.needs_base_versions());
  VersionStore versions = ThreeVersions();
  // Single (first-arrival) update from the current version v2, u = 0: α = 0.9 / 3 = 0.3,
  // Δ = kW1 − kW0 = {1, 0, −1, −2}.
  ModelState s = State(kW0, 2);
  auto one = FoldAll(algo, {{&kW1, 1, 2}}, 2);
  ASSERT_TRUE(algo.Commit(one, versions, s).ok());
  ExpectNear(s.weights, {1.3, 2.0, 2.7, 3.4});
  // A group from bases v2, v1, v0: u = 0, 1, 2 → α_k = 0.3, 0.3/√2, 0.3/√3;
  // Δ = {1, 0, −1, −2}, kW2 − w_1 = {−1, 3, 5, 7}, kW3 − w_0 = {4, 0, 3, 0}.
  s = State(kW0, 2);
  auto group = FoldAll(algo, {{&kW1, 1, 2}, {&kW2, 1, 1}, {&kW3, 1, 0}}, 2);
  ASSERT_TRUE(algo.Commit(group, versions, s).ok());
  const double a1 = 0.3, a2 = 0.3 / std::sqrt(2.0), a3 = 0.3 / std::sqrt(3.0);
  ExpectNear(s.weights,
             {1 + a1 - a2 + 4 * a3, 2 + 3 * a2, 3 - a1 + 5 * a2 + 3 * a3, 4 - 2 * a1 + 7 * a2});
  EXPECT_EQ(s.version, 3u);
  // A base version the store no longer keeps is an error, and the model is unchanged.
  VersionStore only_current(5);
  ASSERT_TRUE(only_current.Put(2, kW0).ok());
  s = State(kW0, 2);
  EXPECT_FALSE(algo.Commit(group, only_current, s).ok());
  EXPECT_EQ(s.weights, kW0);
  EXPECT_EQ(s.version, 2u);
}

// FedCompass takes staleness when the group aggregates: leaves fold α/N (u = 0) per base
// version and the top scales each base's sum by s(t − τ); equal to folding α s(u)/N directly.
TEST(FedCompass, StalenessAtCommitMatchesDirectCoefficients) {
  FedCompass algo(ThreeClients());
  ASSERT_TRUE(algo.staleness_at_commit());
  VersionStore versions = ThreeVersions();
  // Bases 2, 1, 0 at commit version 2; folded with u = 0 into one leaf sum per base.
  PartialSum total(4);
  const std::vector<std::pair<const Vec*, uint64_t>> ups = {{&kW1, 2}, {&kW2, 1}, {&kW3, 0}};
  for (const auto& [w, base] : ups) {
    PartialSum leaf(4);
    UpdateMeta m;
    m.num_samples = 1;
    m.base_version = base;
    m.current_version = base;  // u = 0 at the leaf
    ASSERT_TRUE(leaf.Fold(*w, algo.Coefficient(m), base).ok());
    const std::pair<uint64_t, double> folded[] = {{base, algo.Coefficient(m)}};
    ASSERT_TRUE(total.MergeFolded(leaf.sum(), folded, algo.CommitScale(2 - base)).ok());
  }
  ModelState s = State(kW0, 2);
  ASSERT_TRUE(algo.Commit(total, versions, s).ok());
  const double a1 = 0.3, a2 = 0.3 / std::sqrt(2.0), a3 = 0.3 / std::sqrt(3.0);
  ExpectNear(s.weights,
             {1 + a1 - a2 + 4 * a3, 2 + 3 * a2, 3 - a1 + 5 * a2 + 3 * a3, 4 - 2 * a1 + 7 * a2});
}

TEST(Staleness, PolynomialDecay) {
  EXPECT_DOUBLE_EQ(PolynomialStaleness(0, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(PolynomialStaleness(1, 0.5), 1 / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(PolynomialStaleness(3, 0.5), 0.5);
  FedAsync fedasync;
  FedBuff fedbuff;
  FedCompassParams cp;
  cp.num_clients = 4;
  FedCompass compass(cp);
  const uint64_t us[] = {0, 1, 3};
  const double s[] = {1.0, 1 / std::sqrt(2.0), 0.5};
  for (int i = 0; i < 3; ++i) {
    UpdateMeta m{0, 5, 10 - us[i], 10, 0};
    EXPECT_DOUBLE_EQ(fedasync.Coefficient(m), 0.9 * s[i]);
    EXPECT_DOUBLE_EQ(fedbuff.Coefficient(m), s[i]);
    EXPECT_DOUBLE_EQ(compass.Coefficient(m), 0.9 * s[i] / 4);
  }
}

TEST(Factory, MakesEveryAlgorithmByName) {
  AlgorithmParams p;
  p.fedfix.total_samples = 100;
  p.fedcompass.num_clients = 10;
  for (const char* name :
       {"fedavg", "fedavgm", "fedadam", "fedasync", "fedbuff", "fedfix", "fedcompass"}) {
    auto a = MakeAlgorithm(name, p);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    EXPECT_EQ((*a)->name(), name);
  }
  auto bad = MakeAlgorithm("fedprox");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fedprox"), std::string::npos);
}

TEST(Factory, ValidationNamesTheParameter) {
  struct Case {
    const char* algo;
    void (*set)(AlgorithmParams&);
    const char* param;
  };
  const Case cases[] = {
      {"fedadam", [](AlgorithmParams& p) { p.fedadam.beta2 = 1.2; }, "fedadam.beta2"},
      {"fedadam", [](AlgorithmParams& p) { p.fedadam.tau = 0; }, "fedadam.tau"},
      {"fedavgm", [](AlgorithmParams& p) { p.fedavgm.beta = -0.1; }, "fedavgm.beta"},
      {"fedasync", [](AlgorithmParams& p) { p.fedasync.alpha = 1.5; }, "fedasync.alpha"},
      {"fedbuff", [](AlgorithmParams& p) { p.fedbuff.buffer_size = 0; }, "fedbuff.buffer_size"},
      {"fedfix", [](AlgorithmParams& p) { p.fedfix.total_samples = -1; }, "fedfix.total_samples"},
      {"fedfix", [](AlgorithmParams& p) { p.fedfix.period_s = 0; }, "fedfix.period_s"},
      {"fedcompass", [](AlgorithmParams&) {}, "fedcompass.num_clients"},
      {"fedcompass",
       [](AlgorithmParams& p) {
         p.fedcompass.num_clients = 3;
         p.fedcompass.q_max = 10;
       },
       "fedcompass.q_max"},
  };
  for (const auto& c : cases) {
    AlgorithmParams p;
    c.set(p);
    auto a = MakeAlgorithm(c.algo, p);
    ASSERT_FALSE(a.ok()) << c.param;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(a.status().message().rfind(c.param, 0), 0u) << a.status().message();
  }
  EXPECT_EQ(AlgorithmParams{}.fedadam.Validate().ok(), true);
}

TEST(VersionStore, RefusesBasesOlderThanTheLimit) {
  VersionStore v(5);
  EXPECT_FALSE(v.CheckBase(0).ok());  // nothing committed yet
  for (uint64_t t = 0; t <= 10; ++t) ASSERT_TRUE(v.Put(t, Vec{float(t)}).ok());
  EXPECT_EQ(v.size(), 6u);  // versions 5..10
  Status st = v.CheckBase(3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "base version 3 is older than the staleness limit (current 10, limit 5)");
  EXPECT_FALSE(v.Get(4).ok());
  ASSERT_TRUE(v.Get(5).ok());
  EXPECT_EQ((**v.Get(5))[0], 5.0f);
  EXPECT_FALSE(v.CheckBase(11).ok());
  EXPECT_FALSE(v.Put(10, Vec{0}).ok());  // not newer
  // Shared by value: a reader keeps its version after the store drops it.
  ModelVersion held = *v.Get(5);
  ASSERT_TRUE(v.Put(11, Vec{11}).ok());
  EXPECT_FALSE(v.Get(5).ok());
  EXPECT_EQ((*held)[0], 5.0f);
}

TEST(PartialSum, ReusesBuffersAndRefusesWrongSizes) {
  PartialSum ps;
  ASSERT_TRUE(ps.Fold(kW1, 2.0, 7).ok());
  const float* buf = ps.sum().data();
  ASSERT_TRUE(ps.Fold(kW2, 1.0, 7).ok());
  ASSERT_TRUE(ps.Fold(kW3, 0.5, 8).ok());
  EXPECT_EQ(ps.count(), 3u);
  EXPECT_DOUBLE_EQ(ps.weight(), 3.5);
  ASSERT_EQ(ps.weight_by_base().size(), 2u);
  EXPECT_EQ(ps.weight_by_base()[0], (std::pair<uint64_t, double>{7, 3.0}));
  EXPECT_EQ(ps.weight_by_base()[1], (std::pair<uint64_t, double>{8, 0.5}));
  ExpectNear(Vec(ps.sum().begin(), ps.sum().end()), {6, 8, 11.5, 12});
  EXPECT_FALSE(ps.Fold(Vec{1, 2}, 1.0, 7).ok());
  ps.Reset();
  EXPECT_EQ(ps.count(), 0u);
  ASSERT_TRUE(ps.Fold(kW1, 1.0, 9).ok());
  EXPECT_EQ(ps.sum().data(), buf);  // same buffer after Reset
  ExpectNear(Vec(ps.sum().begin(), ps.sum().end()), {2, 2, 2, 2});
  EXPECT_FALSE(ps.Fold(kW1, std::nan(""), 9).ok());
}

// The top's merge in one pass: the same sum bits, count, weight and per-base weights as Reset
// and MergeFolded of each leaf in order, with and without threads; a leaf with nothing folded
// is skipped, one with a non-finite scale or another size refused (the first refusal returned)
// and the others merged; no leaf: zeros.
TEST(PartialSum, ResetToFoldedIsResetThenMergeFoldedInOrder) {
  constexpr size_t kN = 300'001;  // past FoldPool's min_parallel_elements
  std::vector<Vec> leaf(4, Vec(kN));
  for (size_t k = 0; k < leaf.size(); ++k) {
    for (size_t i = 0; i < kN; ++i) {
      leaf[k][i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i * (k + 1)) + k));
    }
  }
  const std::vector<std::pair<uint64_t, double>> f0 = {{3, 0.5}, {4, 0.25}}, f1 = {{4, 1.5}},
                                                 f2 = {}, f3 = {{2, 0.125}, {3, 2.0}};
  const Vec short_leaf(kN - 1, 1.0f);
  const std::vector<PartialSum::FoldedSum> sums = {
      {leaf[0], f0, 1.0},          {leaf[1], f1, 0.75},   {leaf[2], f2, 1.0},  // nothing folded
      {leaf[3], f1, std::nan("")}, {short_leaf, f3, 1.0}, {leaf[3], f3, 0.5}};
  PartialSum want(kN);
  ASSERT_TRUE(want.Fold(leaf[2], 9.0, 1).ok());  // held before: gone after
  want.Reset();
  for (const auto& s : sums) (void)want.MergeFolded(s.sum, s.folded, s.scale);
  ASSERT_EQ(want.count(), 5u);
  FoldPool threads(2);
  for (FoldPool* pool : {static_cast<FoldPool*>(nullptr), &threads}) {
    PartialSum got(kN);
    ASSERT_TRUE(got.Fold(leaf[2], 9.0, 1).ok());
    const Status st = got.ResetToFolded(sums, pool);
    EXPECT_EQ(st.message(), "merge scale is not finite");
    ASSERT_EQ(got.size(), kN);
    EXPECT_EQ(0, std::memcmp(want.sum().data(), got.sum().data(), kN * 4)) << (pool != nullptr);
    EXPECT_EQ(got.count(), want.count());
    EXPECT_EQ(got.weight(), want.weight());
    ASSERT_EQ(got.weight_by_base().size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got.weight_by_base()[i], want.weight_by_base()[i]);
    // The other refusal, alone: its message is MergeFolded's.
    const std::vector<PartialSum::FoldedSum> two = {{leaf[0], f0, 1.0}, {short_leaf, f3, 1.0}};
    EXPECT_EQ(got.ResetToFolded(two, pool).message(),
              "cannot merge a leaf sum of 300000 parameters into one of 300001");
    EXPECT_EQ(got.count(), 2u);
    EXPECT_EQ(got.sum()[7], leaf[0][7]);
    // No leaf: zeros, nothing counted, the size kept.
    ASSERT_TRUE(got.ResetToFolded({}, pool).ok());
    EXPECT_EQ(got.count(), 0u);
    EXPECT_EQ(got.weight(), 0.0);
    ASSERT_EQ(got.size(), kN);
    EXPECT_EQ(*std::max_element(got.sum().begin(), got.sum().end()), 0.0f);
    EXPECT_EQ(*std::min_element(got.sum().begin(), got.sum().end()), 0.0f);
  }
  // An empty sum takes the size of the first leaf merged, as MergeFolded's does.
  PartialSum fresh;
  ASSERT_TRUE(fresh.ResetToFolded(sums, &threads).message() == "merge scale is not finite");
  EXPECT_EQ(0, std::memcmp(want.sum().data(), fresh.sum().data(), kN * 4));
}

TEST(ModelState, CheckpointRoundTripIsBytesEqual) {
  ModelState s;
  s.version = 42;
  s.weights = {1.5f, -0.0f, std::nanf(""), 3e-39f, 1e30f};
  s.momentum = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  s.second_moment = {};
  auto bytes = s.Serialize();
  EXPECT_EQ(bytes.size(), 4 + 4 + 8 + 24 + 10 * sizeof(float));
  auto back = ModelState::Deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, 42u);
  EXPECT_EQ(back->Serialize(), bytes);
  EXPECT_EQ(back->momentum, s.momentum);
  // Truncated, trailing bytes and wrong magic are refused.
  auto cut = bytes;
  cut.pop_back();
  EXPECT_FALSE(ModelState::Deserialize(cut).ok());
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(ModelState::Deserialize(longer).ok());
  auto magic = bytes;
  magic[0] = 'X';
  EXPECT_FALSE(ModelState::Deserialize(magic).ok());
}

}  // namespace
}  // namespace shoal::aggregator
