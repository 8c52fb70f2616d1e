#include "shoal/tools/flsim/mlp_trainer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "shoal/tools/flsim/partition.h"

namespace shoal::client {
namespace {

TEST(MlpLayout, PyTorchNamesShapesAndOffsets) {
  const MlpShape s;  // 784-128-10
  const auto layout = MlpTensorLayout(s);
  ASSERT_EQ(layout.size(), 4U);
  EXPECT_EQ(layout[0].name, "fc1.weight");
  EXPECT_EQ(layout[0].shape, (std::vector<int64_t>{128, 784}));
  EXPECT_EQ(layout[0].offset, 0U);
  EXPECT_EQ(layout[1].name, "fc1.bias");
  EXPECT_EQ(layout[1].shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(layout[1].offset, 128U * 784U);
  EXPECT_EQ(layout[2].name, "fc2.weight");
  EXPECT_EQ(layout[2].shape, (std::vector<int64_t>{10, 128}));
  EXPECT_EQ(layout[2].offset, 128U * 784U + 128U);
  EXPECT_EQ(layout[3].name, "fc2.bias");
  EXPECT_EQ(layout[3].offset, 128U * 784U + 128U + 1280U);
  EXPECT_EQ(s.NumParams(), 101770U);
  EXPECT_EQ(layout[3].offset + layout[3].size, s.NumParams());
}

TEST(MlpInit, KaimingUniformBoundsAndDeterminism) {
  const MlpShape s;
  const auto p = InitMlpParams(s, 1);
  EXPECT_EQ(p, InitMlpParams(s, 1));
  EXPECT_NE(p, InitMlpParams(s, 2));
  const float b1 = 1.0F / std::sqrt(784.0F), b2 = 1.0F / std::sqrt(128.0F);
  float max1 = 0, max2 = 0;
  for (size_t i = 0; i < s.Fc2WeightOffset(); ++i) max1 = std::max(max1, std::abs(p[i]));
  for (size_t i = s.Fc2WeightOffset(); i < p.size(); ++i) max2 = std::max(max2, std::abs(p[i]));
  EXPECT_LE(max1, b1);
  EXPECT_GT(max1, 0.95F * b1);  // the whole range is used
  EXPECT_LE(max2, b2);
  EXPECT_GT(max2, 0.9F * b2);
}

// Mean cross-entropy in double precision, written independently of the trainer.
double ReferenceLoss(const MlpShape& s, const std::vector<double>& p, const std::vector<float>& x,
                     const std::vector<uint8_t>& y) {
  const int batch = int(y.size());
  double total = 0;
  for (int b = 0; b < batch; ++b) {
    std::vector<double> h(size_t(s.hidden)), z(size_t(s.classes));
    for (int j = 0; j < s.hidden; ++j) {
      double a = p[s.Fc1BiasOffset() + size_t(j)];
      for (int i = 0; i < s.inputs; ++i) {
        a += p[size_t(j) * size_t(s.inputs) + size_t(i)] *
             x[size_t(b) * size_t(s.inputs) + size_t(i)];
      }
      h[size_t(j)] = std::max(0.0, a);
    }
    for (int c = 0; c < s.classes; ++c) {
      double a = p[s.Fc2BiasOffset() + size_t(c)];
      for (int j = 0; j < s.hidden; ++j) {
        a += p[s.Fc2WeightOffset() + size_t(c) * size_t(s.hidden) + size_t(j)] * h[size_t(j)];
      }
      z[size_t(c)] = a;
    }
    const double m = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double v : z) sum += std::exp(v - m);
    total += std::log(sum) + m - z[y[size_t(b)]];
  }
  return total / batch;
}

TEST(MlpTrainer, GradientMatchesFiniteDifferences) {
  // Odd sizes exercise the kernels' tails (batch not a multiple of 4, hidden not of 2).
  const MlpShape s{9, 7, 4};
  const int batch = 7;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g(0.0F, 1.0F);
  std::vector<float> x(size_t(batch) * 9);
  for (float& v : x) v = g(rng);
  std::vector<uint8_t> y = {0, 1, 2, 3, 0, 2, 1};
  std::vector<float> params = InitMlpParams(s, 11);
  for (float& v : params) v *= 3.0F;  // livelier activations than the tiny init gives

  MlpTrainer trainer(s, {}, 1);
  std::vector<float> grad(s.NumParams());
  const double loss = trainer.LossAndGradient(params, x.data(), y.data(), batch, grad);

  std::vector<double> pd(params.begin(), params.end());
  EXPECT_NEAR(loss, ReferenceLoss(s, pd, x, y), 1e-5);
  double diff2 = 0, norm2 = 0, worst = 0;
  const double eps = 1e-6;
  for (size_t i = 0; i < pd.size(); ++i) {
    const double keep = pd[i];
    pd[i] = keep + eps;
    const double up = ReferenceLoss(s, pd, x, y);
    pd[i] = keep - eps;
    const double down = ReferenceLoss(s, pd, x, y);
    pd[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    diff2 += (numeric - grad[i]) * (numeric - grad[i]);
    norm2 += numeric * numeric;
    worst = std::max(worst, std::abs(numeric - grad[i]) / std::max(std::abs(numeric), 1e-2));
  }
  ASSERT_GT(norm2, 1e-4);
  EXPECT_LT(std::sqrt(diff2 / norm2), 1e-3);
  EXPECT_LT(worst, 1e-3);
}

TEST(MlpTrainer, ForwardBatchMatchesEvaluate) {
  const MlpShape s{12, 6, 3};
  auto data = MakeSyntheticDataset(300, 12, 3, 5);
  const auto params = InitMlpParams(s, 2);
  std::vector<float> hidden(300 * 6), logits(300 * 3);
  ForwardBatch(s, params, data.features.data(), 300, hidden.data(), logits.data());
  size_t correct = 0;
  for (size_t b = 0; b < 300; ++b) {
    const float* z = logits.data() + b * 3;
    correct += size_t(std::max_element(z, z + 3) - z) == data.labels[b] ? 1 : 0;
  }
  auto eval = Evaluate(s, params, data);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->samples, 300U);
  EXPECT_DOUBLE_EQ(eval->accuracy, double(correct) / 300.0);
  EXPECT_NEAR(eval->loss, std::log(3.0), 0.5);  // near-uniform predictions at init
}

TEST(MlpTrainer, ReachesFullAccuracyOnSyntheticData) {
  const MlpShape s{20, 16, 4};
  auto data = MakeSyntheticDataset(1000, 20, 4, 9);
  auto params = InitMlpParams(s, 1);
  MlpTrainer trainer(s, {0.1F, 32}, 7);
  auto before = Evaluate(s, params, data);
  ASSERT_TRUE(before.ok());
  auto stats = trainer.Train(params, data, {}, 300);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->steps, 300);
  EXPECT_EQ(stats->samples, 300U * 32U);
  auto after = Evaluate(s, params, data);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->accuracy, 1.0);
  EXPECT_LT(after->loss, before->loss / 5);
}

TEST(MlpTrainer, DeterministicFromSeedWithMomentumAndWeightDecay) {
  const MlpShape s{20, 16, 4};
  auto data = MakeSyntheticDataset(500, 20, 4, 9);
  const SgdOptions opts{0.05F, 16, 0.9F, 1e-3F};
  auto run = [&](uint64_t seed) {
    auto params = InitMlpParams(s, 1);
    MlpTrainer trainer(s, opts, seed);
    std::vector<uint32_t> idx(250);
    std::iota(idx.begin(), idx.end(), 100U);
    EXPECT_TRUE(trainer.Train(params, data, idx, 40).ok());
    EXPECT_TRUE(trainer.Train(params, data, idx, 40).ok());  // the shuffle carries on
    return params;
  };
  const auto a = run(5);
  EXPECT_EQ(a, run(5));
  EXPECT_NE(a, run(6));
  auto eval = Evaluate(s, a, data);
  ASSERT_TRUE(eval.ok());
  EXPECT_GT(eval->accuracy, 0.95);
}

TEST(MlpTrainer, ShuffleCarriesOnAcrossCalls) {
  // Plain SGD keeps no state but the shuffle: 40 + 40 steps equal 80 steps exactly.
  const MlpShape s{20, 16, 4};
  auto data = MakeSyntheticDataset(200, 20, 4, 9);
  std::vector<uint32_t> idx(150);
  std::iota(idx.begin(), idx.end(), 10U);
  auto split = InitMlpParams(s, 1), whole = split;
  MlpTrainer a(s, {0.05F, 16}, 3), b(s, {0.05F, 16}, 3);
  ASSERT_TRUE(a.Train(split, data, idx, 40).ok());
  ASSERT_TRUE(a.Train(split, data, idx, 40).ok());
  ASSERT_TRUE(b.Train(whole, data, idx, 80).ok());
  EXPECT_EQ(split, whole);
}

TEST(MlpTrainer, RejectsMismatchedInputs) {
  const MlpShape s{20, 16, 4};
  auto data = MakeSyntheticDataset(100, 20, 4, 9);
  MlpTrainer trainer(s, {}, 1);
  std::vector<float> wrong(10);
  auto r = trainer.Train(wrong, data, {}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("20-16-4"), std::string::npos) << r.status().message();
  auto params = InitMlpParams(s, 1);
  std::vector<uint32_t> bad = {5, 100};
  r = trainer.Train(params, data, bad, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("index 100"), std::string::npos);
  auto other = MakeSyntheticDataset(100, 21, 4, 9);
  EXPECT_FALSE(trainer.Train(params, other, {}, 1).ok());
  EXPECT_FALSE(Evaluate(s, params, other).ok());
}

class FashionMnistTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
      return;
    }
    auto split = LoadFashionMnist();
    ASSERT_TRUE(split.ok()) << split.status().ToString();
    data_ = new DatasetSplit(std::move(*split));
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }
  void SetUp() override {
    if (data_ == nullptr) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  static DatasetSplit* data_;
};
DatasetSplit* FashionMnistTraining::data_ = nullptr;

TEST_F(FashionMnistTraining, OneClient600StepsReaches75Percent) {
  const MlpShape s;
  auto params = InitMlpParams(s, 1);
  MlpTrainer trainer(s, {0.1F, 32}, 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = trainer.Train(params, data_->train, {}, 600);
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(stats.ok());
  auto eval = Evaluate(s, params, data_->test);
  ASSERT_TRUE(eval.ok());
  std::printf("600 steps x 32: %.3f s (%.0f samples/s), train loss %.3f, test acc %.4f loss %.3f\n",
              train_s, 600 * 32 / train_s, stats->mean_loss, eval->accuracy, eval->loss);
  EXPECT_GE(eval->accuracy, 0.75);
}

TEST_F(FashionMnistTraining, FedAvgOfIidShardsMatchesCentralTraining) {
  const MlpShape s;
  const auto init = InitMlpParams(s, 3);
  auto shards = Partition(data_->train.labels, 10, 4, {PartitionSpec::Kind::kIid}, 8);
  ASSERT_TRUE(shards.ok());
  constexpr int kSteps = 600;
  // Each client trains from the same init on its own shard; the server averages the four
  // parameter vectors element by element (equal shard sizes: equal weights).
  std::vector<double> sum(s.NumParams(), 0.0);
  for (int k = 0; k < 4; ++k) {
    auto p = init;
    MlpTrainer trainer(s, {0.05F, 32}, uint64_t(100 + k));
    ASSERT_TRUE(trainer.Train(p, data_->train, (*shards)[size_t(k)], kSteps).ok());
    for (size_t i = 0; i < p.size(); ++i) sum[i] += p[i];
  }
  std::vector<float> avg(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) avg[i] = float(sum[i] / 4);

  auto central = init;
  MlpTrainer trainer(s, {0.05F, 32}, 100);
  ASSERT_TRUE(trainer.Train(central, data_->train, {}, kSteps).ok());

  auto e_avg = Evaluate(s, avg, data_->test);
  auto e_central = Evaluate(s, central, data_->test);
  ASSERT_TRUE(e_avg.ok() && e_central.ok());
  std::printf("fedavg of 4 iid clients: %.4f, one client on all shards: %.4f\n", e_avg->accuracy,
              e_central->accuracy);
  EXPECT_NEAR(e_avg->accuracy, e_central->accuracy, 0.04);
  EXPECT_GT(e_avg->accuracy, 0.7);
}

}  // namespace
}  // namespace shoal::client
