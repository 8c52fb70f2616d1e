#include "shoal/fl/wire/architectures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace shoal::model {
namespace {

std::vector<std::string> Names(const ModelSpec& s) {
  std::vector<std::string> n;
  for (const TensorSpec& t : s.tensors()) n.push_back(t.name + ShapeString(t.shape));
  return n;
}

TEST(Architectures, MlpShapesAndParameterCount) {
  const ModelSpec mlp = MlpSpec();
  EXPECT_EQ(Names(mlp), (std::vector<std::string>{"fc1.weight[128,784]", "fc1.bias[128]",
                                                  "fc2.weight[10,128]", "fc2.bias[10]"}));
  EXPECT_EQ(mlp.num_params(), 101770u);
  EXPECT_EQ(mlp.offset(2), 128u * 784 + 128);
  EXPECT_EQ(MlpSpec(784, {256, 128}, 10).num_params(), 784u * 256 + 256 + 256 * 128 + 128 + 1290);
  EXPECT_EQ(Names(MlpSpec(64, {64}, 10)).back(), "fc2.bias[10]");
  EXPECT_EQ(MlpSpec(784, {256, 128}, 10).tensor(4).name, "fc3.weight");
}

TEST(Architectures, CnnShapesAndParameterCount) {
  const ModelSpec cnn = CnnSpec();
  EXPECT_EQ(Names(cnn), (std::vector<std::string>{"conv1.weight[32,1,3,3]", "conv1.bias[32]",
                                                  "conv2.weight[64,32,3,3]", "conv2.bias[64]",
                                                  "fc1.weight[128,9216]", "fc1.bias[128]",
                                                  "fc2.weight[10,128]", "fc2.bias[10]"}));
  EXPECT_EQ(cnn.num_params(), 1199882u);
  EXPECT_EQ(cnn.tensor(2).fan_in, 32u * 9);
  EXPECT_EQ(cnn.tensor(3).fan_in, 32u * 9);
}

TEST(Architectures, LogRegAndByName) {
  EXPECT_EQ(LogRegSpec().num_params(), 7850u);
  EXPECT_EQ(ArchitectureSpec("mlp").value().num_params(), 101770u);
  EXPECT_EQ(ArchitectureSpec("cnn").value().num_params(), 1199882u);
  ArchitectureOptions digits;
  digits.inputs = 64;
  digits.hidden = {64};
  EXPECT_EQ(ArchitectureSpec("mlp", digits).value().num_params(), 64u * 64 + 64 + 650);
  EXPECT_EQ(ArchitectureSpec("resnet").status().message(),
            "unknown architecture 'resnet' (built-ins: logreg, mlp, cnn)");
  ArchitectureOptions zero;
  zero.hidden = {0};
  EXPECT_EQ(ArchitectureSpec("mlp", zero).status().code(), StatusCode::kInvalidArgument);
  ArchitectureOptions two;
  two.hidden = {32, 32};
  EXPECT_EQ(ArchitectureSpec("cnn", two).status().message(),
            "architecture 'cnn': exactly one hidden size (fc1) expected");
}

TEST(Architectures, InitIsDeterministicAndWithinPyTorchBounds) {
  const ModelSpec spec = MlpSpec();
  const Model a = InitModel(spec, 7);
  const Model b = InitModel(spec, 7);
  const Model c = InitModel(spec, 8);
  ASSERT_EQ(a.values.size(), 101770u);
  EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * 4), 0);
  EXPECT_NE(std::memcmp(a.values.data(), c.values.data(), a.values.size() * 4), 0);
  // Pinned values: the generator (mt19937_64) and the float construction are fixed, so these
  // do not change across platforms or standard libraries.
  EXPECT_FLOAT_EQ(a.values[0], 0.0181703791f);
  EXPECT_FLOAT_EQ(a.values[1], 0.0320929438f);
  EXPECT_FLOAT_EQ(a.values[101769], -0.020410981f);
  for (size_t i = 0; i < spec.size(); ++i) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(spec.tensor(i).fan_in));
    double sum = 0, max_abs = 0;
    for (float v : a.tensor(i)) {
      ASSERT_LE(std::fabs(v), bound);
      sum += v;
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
    }
    const double n = static_cast<double>(a.tensor(i).size());
    // Uniform on [-b, b]: mean 0 (std b/sqrt(3n)), maximum close to b.
    EXPECT_LT(std::fabs(sum / n), 5 * bound / std::sqrt(3 * n)) << spec.tensor(i).name;
    if (n >= 100) {
      EXPECT_GT(max_abs, 0.95 * bound) << spec.tensor(i).name;
    }
  }
  // fc1 bound 1/sqrt(784) = 1/28; fc2 bound 1/sqrt(128).
  EXPECT_EQ(spec.tensor(1).fan_in, 784u);
  EXPECT_EQ(spec.tensor(3).fan_in, 128u);
}

}  // namespace
}  // namespace shoal::model
