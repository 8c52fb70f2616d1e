// Hierarchical aggregation equals the flat computation: 37 random updates split over 1, 2 and 5
// leaves in shuffled orders, merged in another order, committed, and compared with every
// algorithm's formula evaluated directly in double. Also: server optimizer state carried over
// three commits (through a checkpoint) against a reference loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "shoal/fl/algorithms/algorithms.h"

namespace shoal::aggregator {
namespace {

constexpr size_t kParams = 64;
constexpr size_t kUpdates = 37;
constexpr uint64_t kCurrent = 6;

struct Update {
  std::vector<float> x;
  UpdateMeta meta;
};

struct Fixture {
  std::vector<std::vector<float>> versions;  // versions[τ] for τ = 0..kCurrent
  std::vector<Update> updates;
};

Fixture MakeFixture(uint32_t seed, bool stale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1, 1);
  std::uniform_int_distribution<int> samples(1, 500);
  std::uniform_int_distribution<uint64_t> base(kCurrent - 3, kCurrent);
  Fixture f;
  for (uint64_t t = 0; t <= kCurrent; ++t) {
    std::vector<float> w(kParams);
    for (auto& e : w) e = val(rng);
    f.versions.push_back(std::move(w));
  }
  for (size_t k = 0; k < kUpdates; ++k) {
    Update u;
    u.x.resize(kParams);
    for (auto& e : u.x) e = val(rng);
    u.meta = {k, double(samples(rng)), stale ? base(rng) : kCurrent, kCurrent, double(k)};
    f.updates.push_back(std::move(u));
  }
  return f;
}

// The formulas of FL-ALGORITHMS.md over all updates at once, in double.
std::vector<double> Reference(const std::string& name, const AlgorithmParams& p, const Fixture& f) {
  const auto& w = f.versions[kCurrent];
  std::vector<double> out(w.begin(), w.end());
  double total_n = 0;
  for (const auto& u : f.updates) total_n += u.meta.num_samples;
  auto s = [](uint64_t u, double a) { return std::pow(1.0 + double(u), -a); };
  if (name == "fedavg" || name == "fedavgm" || name == "fedadam") {
    std::vector<double> avg(kParams, 0);
    for (const auto& u : f.updates)
      for (size_t i = 0; i < kParams; ++i) avg[i] += u.meta.num_samples / total_n * u.x[i];
    for (size_t i = 0; i < kParams; ++i) {
      const double d = avg[i] - w[i];
      if (name == "fedavg") {
        out[i] = avg[i];
      } else if (name == "fedavgm") {
        out[i] = w[i] + p.fedavgm.eta * d;  // v = 0 + Δ
      } else {
        const double m = (1 - p.fedadam.beta1) * d, v = (1 - p.fedadam.beta2) * d * d;
        out[i] = w[i] + p.fedadam.eta * m / (std::sqrt(v) + p.fedadam.tau);
      }
    }
  } else if (name == "fedasync") {
    const double alpha = p.fedasync.alpha;
    double sum_a = 0;
    std::vector<double> acc(kParams, 0);
    for (const auto& u : f.updates) {
      const double a = alpha * s(kCurrent - u.meta.base_version, 0.5);
      sum_a += a;
      for (size_t i = 0; i < kParams; ++i) acc[i] += a * u.x[i];
    }
    for (size_t i = 0; i < kParams; ++i) out[i] = (1 - sum_a) * w[i] + acc[i];
  } else if (name == "fedbuff" || name == "fedfix" || name == "fedcompass") {
    for (const auto& u : f.updates) {
      const auto& wt = f.versions[u.meta.base_version];
      const double st = s(kCurrent - u.meta.base_version, 0.5);
      const double c = name == "fedbuff"  ? p.fedbuff.eta_g * st / kUpdates
                       : name == "fedfix" ? u.meta.num_samples / p.fedfix.total_samples
                                          : p.fedcompass.alpha * st / p.fedcompass.num_clients;
      for (size_t i = 0; i < kParams; ++i) out[i] += c * (double(u.x[i]) - wt[i]);
    }
  }
  return out;
}

class HierarchicalEqualsFlat : public ::testing::TestWithParam<const char*> {};

TEST_P(HierarchicalEqualsFlat, AnyLeafSplitAndOrder) {
  const std::string name = GetParam();
  AlgorithmParams p;
  p.fedbuff.buffer_size = kUpdates;
  p.fedfix.total_samples = 20000;
  p.fedcompass.num_clients = 50;
  auto algo_or = MakeAlgorithm(name, p);
  ASSERT_TRUE(algo_or.ok()) << algo_or.status().ToString();
  auto& algo = **algo_or;
  const bool stale = !algo.synchronous();
  const Fixture f = MakeFixture(name.size() * 7919u, stale);
  VersionStore versions(3);
  for (uint64_t t = 0; t <= kCurrent; ++t) ASSERT_TRUE(versions.Put(t, f.versions[t]).ok());
  const auto ref = Reference(name, p, f);

  std::mt19937 rng(1234);
  for (size_t leaves : {1u, 2u, 5u}) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<size_t> order(kUpdates);
      for (size_t i = 0; i < kUpdates; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<PartialSum> leaf(leaves);
      for (size_t j = 0; j < kUpdates; ++j) {
        const Update& u = f.updates[order[j]];
        ASSERT_TRUE(
            leaf[rng() % leaves].Fold(u.x, algo.Coefficient(u.meta), u.meta.base_version).ok());
      }
      std::vector<size_t> merge_order(leaves);
      for (size_t i = 0; i < leaves; ++i) merge_order[i] = i;
      std::shuffle(merge_order.begin(), merge_order.end(), rng);
      PartialSum top;
      for (size_t i : merge_order) ASSERT_TRUE(top.Merge(leaf[i]).ok());
      ASSERT_EQ(top.count(), kUpdates);

      ModelState state;
      state.version = kCurrent;
      state.weights = f.versions[kCurrent];
      ASSERT_TRUE(algo.Commit(top, versions, state).ok());
      EXPECT_EQ(state.version, kCurrent + 1);
      for (size_t i = 0; i < kParams; ++i) {
        ASSERT_NEAR(state.weights[i], ref[i], 1e-5 * std::max(1.0, std::abs(ref[i])))
            << name << " leaves=" << leaves << " trial=" << trial << " i=" << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, HierarchicalEqualsFlat,
                         ::testing::Values("fedavg", "fedavgm", "fedadam", "fedasync", "fedbuff",
                                           "fedfix", "fedcompass"));

// Three rounds of FedAvgM and FedAdam, the state checkpointed and restored between rounds,
// against the formulas applied in a plain double loop.
TEST(ServerOptimizer, StateCarriedAcrossThreeCommits) {
  for (const std::string name : {"fedavgm", "fedadam"}) {
    AlgorithmParams p;
    auto algo = std::move(MakeAlgorithm(name, p).value());
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> val(-1, 1);
    ModelState state;
    state.weights.resize(kParams);
    for (auto& e : state.weights) e = val(rng);
    std::vector<double> w(state.weights.begin(), state.weights.end()), m(kParams, 0), v(kParams, 0);
    VersionStore versions(0);
    for (int round = 0; round < 3; ++round) {
      PartialSum total;
      std::vector<double> avg(kParams, 0);
      double total_n = 0;
      std::vector<std::pair<std::vector<float>, double>> clients;
      for (int k = 0; k < 4; ++k) {
        std::vector<float> x(kParams);
        for (auto& e : x) e = val(rng);
        const double n = 10 + 5 * k;
        total_n += n;
        clients.emplace_back(std::move(x), n);
      }
      for (const auto& [x, n] : clients) {
        ASSERT_TRUE(
            total.Fold(x, algo->Coefficient({0, n, state.version, state.version, 0}), state.version)
                .ok());
        for (size_t i = 0; i < kParams; ++i) avg[i] += n / total_n * x[i];
      }
      for (size_t i = 0; i < kParams; ++i) {
        const double d = avg[i] - w[i];
        if (name == "fedavgm") {
          m[i] = 0.9 * m[i] + d;
          w[i] += 1.0 * m[i];
        } else {
          m[i] = 0.9 * m[i] + 0.1 * d;
          v[i] = 0.99 * v[i] + 0.01 * d * d;
          w[i] += 0.1 * m[i] / (std::sqrt(v[i]) + 1e-3);
        }
      }
      ASSERT_TRUE(algo->Commit(total, versions, state).ok());
      auto restored = ModelState::Deserialize(state.Serialize());
      ASSERT_TRUE(restored.ok());
      state = std::move(*restored);
      for (size_t i = 0; i < kParams; ++i) {
        ASSERT_NEAR(state.weights[i], w[i], 1e-5) << name << " round " << round;
        ASSERT_NEAR(state.momentum[i], m[i], 1e-5) << name << " round " << round;
        if (name == "fedadam") {
          ASSERT_NEAR(state.second_moment[i], v[i], 1e-6);
        }
      }
    }
    EXPECT_EQ(state.version, 3u);
  }
}

}  // namespace
}  // namespace shoal::aggregator
