// Every operator on the CPU executor against values computed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "test_graphs.h"

namespace shoal::inference {
namespace {

using testing::AddInit;
using testing::AddInts;
using testing::ExpectNear;
using testing::OneInput;
using testing::PaddedStridedConv;
using testing::RunCpu;

TEST(CpuOps, GemmTransBWithBiasAndAlphaBeta) {
  Graph g = OneInput({2});
  AddInit(g, "W", {3, 2}, {1, 2, 3, 4, 5, 6});  // [N=3,K=2], transB
  AddInit(g, "b", {3}, {0.5f, -1, 2});
  g.nodes.push_back({OpType::kGemm,
                     "fc",
                     {"x", "W", "b"},
                     {"y"},
                     {{"transB", int64_t{1}}, {"alpha", 2.0f}, {"beta", 0.5f}}});
  // x=[1,-1]: W x = [-1,-1,-1]; *2 = [-2,-2,-2]; + 0.5*b = [-1.75,-2.5,-1]
  ExpectNear(RunCpu(g, {1, -1, 0, 2}, 2), {-1.75f, -2.5f, -1.0f, 8.25f, 15.5f, 25.0f});
}

TEST(CpuOps, GemmNoTransposeAndFusedRelu) {
  Graph g = OneInput({2});
  AddInit(g, "W", {2, 2}, {1, -1, 2, -2});  // [K,N]
  g.nodes.push_back({OpType::kGemm, "fc", {"x", "W"}, {"h"}, {}});
  g.nodes.push_back({OpType::kRelu, "relu", {"h"}, {"y"}, {}});
  // [1,1] x W = [3,-3] -> relu [3,0]
  ExpectNear(RunCpu(g, {1, 1}, 1), {3, 0});
}

TEST(CpuOps, MatMulThenAddConstant) {
  Graph g = OneInput({3});
  AddInit(g, "B", {3, 1}, {1, 2, 3});
  AddInit(g, "c", {1}, {10});
  g.nodes.push_back({OpType::kMatMul, "mm", {"x", "B"}, {"m"}, {}});
  g.nodes.push_back({OpType::kAdd, "add", {"c", "m"}, {"y"}, {}});
  ExpectNear(RunCpu(g, {1, 1, 1, 1, 0, -1}, 2), {16, 8});
}

TEST(CpuOps, AddTwoRuntimeTensorsAndRelu) {
  Graph g = OneInput({4});
  g.nodes.push_back({OpType::kRelu, "r", {"x"}, {"rx"}, {}});
  g.nodes.push_back({OpType::kAdd, "add", {"x", "rx"}, {"y"}, {}});
  // x + relu(x): negatives stay, positives double
  ExpectNear(RunCpu(g, {-1, 2, -3, 4}, 1), {-1, 4, -3, 8});
}

TEST(CpuOps, ConvPadsStridesBias) {
  ExpectNear(RunCpu(PaddedStridedConv(), {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1), {101, 105, 111, 128});
}

TEST(CpuOps, ConvDilationAndGroups) {
  Graph g = OneInput({2, 3, 3});
  // group 2: channel 0 with kernel of 1s, channel 1 with kernel of 2s, dilation 2 (corners).
  AddInit(g, "W", {2, 1, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2});
  g.nodes.push_back({OpType::kConv,
                     "conv",
                     {"x", "W"},
                     {"y"},
                     {{"group", int64_t{2}}, {"dilations", std::vector<int64_t>{2, 2}}}});
  std::vector<float> x(18);
  for (size_t i = 0; i < 18; ++i) x[i] = static_cast<float>(i);
  // corners of channel 0: 0+2+6+8 = 16; channel 1: 2*(9+11+15+17) = 104
  ExpectNear(RunCpu(g, x, 1), {16, 104});
}

TEST(CpuOps, ConvFusedRelu) {
  Graph g = OneInput({1, 1, 2});
  AddInit(g, "W", {2, 1, 1, 1}, {1, -1});
  g.nodes.push_back({OpType::kConv, "conv", {"x", "W"}, {"c"}, {}});
  g.nodes.push_back({OpType::kRelu, "relu", {"c"}, {"y"}, {}});
  ExpectNear(RunCpu(g, {3, -2}, 1), {3, 0, 0, 2});
}

// Residual connections: Add(Conv(a), a) runs as the conv's sum post-op writing into a's bytes
// (with the Relu after the Add as its eltwise post-op) when nothing reads a afterwards. 8
// channels of 3x3 (oneDNN's blocked layouts, as in ResNet), 1x1 convolutions whose weights are
// `scale` times the identity and whose bias is c - 3 for channel c.
void AddDiagonalConv(Graph& g, const std::string& name, const std::string& in,
                     const std::string& out, float scale, bool bias) {
  std::vector<float> w(64, 0.0f), b(8);
  for (size_t c = 0; c < 8; ++c) {
    w[c * 8 + c] = scale;
    b[c] = static_cast<float>(c) - 3.0f;
  }
  AddInit(g, name + ".w", {8, 8, 1, 1}, w);
  std::vector<std::string> inputs{in, name + ".w"};
  if (bias) {
    AddInit(g, name + ".b", {8}, b);
    inputs.push_back(name + ".b");
  }
  g.nodes.push_back({OpType::kConv, name, inputs, {out}, {}});
}

std::vector<float> ResidualInput(int64_t batch) {
  std::vector<float> x(static_cast<size_t>(batch * 72));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 9) - 4) * 0.5f;
  return x;
}

// y[n,c,h,w] = f(k * x + (c - 3)) for every element.
std::vector<float> PerChannel(const std::vector<float>& x, float k, bool relu) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = k * x[i] + static_cast<float>((i / 9) % 8) - 3.0f;
    y[i] = relu ? std::max(v, 0.0f) : v;
  }
  return y;
}

TEST(CpuOps, ResidualAddAndReluOfAComputedTensor) {
  Graph g = OneInput({8, 3, 3});
  AddDiagonalConv(g, "conv0", "x", "a", 1.0f, false);  // a = x, in the arena
  AddDiagonalConv(g, "conv1", "a", "h", 1.0f, false);  // a block's first conv
  AddDiagonalConv(g, "conv2", "h", "c", 2.0f, true);   // c = 2a + bias
  g.nodes.push_back({OpType::kAdd, "add", {"c", "a"}, {"s"}, {}});
  g.nodes.push_back({OpType::kRelu, "relu", {"s"}, {"y"}, {}});
  const auto x = ResidualInput(3);
  ExpectNear(RunCpu(g, x, 3), PerChannel(x, 3.0f, true));
}

TEST(CpuOps, ResidualAddOfTheGraphInputLeavesTheCallersBytes) {
  Graph g = OneInput({8, 3, 3});
  AddDiagonalConv(g, "conv1", "x", "h", 1.0f, false);
  AddDiagonalConv(g, "conv2", "h", "c", 2.0f, true);
  g.nodes.push_back({OpType::kAdd, "add", {"x", "c"}, {"y"}, {}});  // no Relu, graph output
  const auto x = ResidualInput(2);
  const auto before = x;
  ExpectNear(RunCpu(g, x, 2), PerChannel(x, 3.0f, false));
  EXPECT_EQ(x, before);
}

TEST(CpuOps, AResidualReadAgainAfterTheConvIsNotOverwritten) {
  Graph g = OneInput({8, 3, 3});
  AddDiagonalConv(g, "conv0", "x", "a", 1.0f, false);
  AddDiagonalConv(g, "conv1", "a", "h", 1.0f, false);
  AddDiagonalConv(g, "conv2", "h", "c", 2.0f, true);
  g.nodes.push_back({OpType::kAdd, "add1", {"c", "a"}, {"s"}, {}});
  g.nodes.push_back({OpType::kAdd, "add2", {"s", "a"}, {"y"}, {}});  // a read once more
  const auto x = ResidualInput(3);
  ExpectNear(RunCpu(g, x, 3), PerChannel(x, 4.0f, false));
}

TEST(CpuOps, BatchNormalization) {
  Graph g = OneInput({2, 1, 1});
  AddInit(g, "s", {2}, {2, 1});
  AddInit(g, "b", {2}, {1, 0});
  AddInit(g, "m", {2}, {1, -1});
  AddInit(g, "v", {2}, {4, 1});
  g.nodes.push_back(
      {OpType::kBatchNormalization, "bn", {"x", "s", "b", "m", "v"}, {"y"}, {{"epsilon", 0.0f}}});
  // ch0: (5-1)*2/2+1 = 5; ch1: (1+1)*1/1+0 = 2
  ExpectNear(RunCpu(g, {5, 1}, 1), {5, 2});
}

TEST(CpuOps, MaxPoolWithPadding) {
  Graph g = OneInput({1, 2, 3});
  g.nodes.push_back({OpType::kMaxPool,
                     "pool",
                     {"x"},
                     {"y"},
                     {{"kernel_shape", std::vector<int64_t>{2, 2}},
                      {"strides", std::vector<int64_t>{2, 2}},
                      {"pads", std::vector<int64_t>{0, 1, 0, 0}}}});
  // x = [[-1,-2,-3],[-4,-5,-6]], left pad 1: windows cols {pad,0} and {1,2}
  ExpectNear(RunCpu(g, {-1, -2, -3, -4, -5, -6}, 1), {-1, -2});
}

TEST(CpuOps, AveragePoolCountIncludePad) {
  Graph g = OneInput({1, 2, 2});
  for (int64_t include : {0, 1}) {
    Graph h = g;
    h.nodes.push_back({OpType::kAveragePool,
                       "pool",
                       {"x"},
                       {"y"},
                       {{"kernel_shape", std::vector<int64_t>{2, 2}},
                        {"pads", std::vector<int64_t>{1, 1, 0, 0}},
                        {"strides", std::vector<int64_t>{2, 2}},
                        {"count_include_pad", include}}});
    // one window: pad,pad,pad,x00 -> x00=4 averaged over 1 (exclude) or 4 (include)
    ExpectNear(RunCpu(h, {4, 8, 8, 8}, 1), {include ? 1.0f : 4.0f});
  }
}

TEST(CpuOps, GlobalAveragePoolFlattenSoftmax) {
  Graph g = OneInput({2, 2, 2});
  g.nodes.push_back({OpType::kGlobalAveragePool, "gap", {"x"}, {"p"}, {}});
  g.nodes.push_back({OpType::kFlatten, "flat", {"p"}, {"f"}, {}});
  g.nodes.push_back({OpType::kSoftmax, "sm", {"f"}, {"y"}, {}});
  // channel means 1 and 2 -> softmax [1/(1+e), e/(1+e)]
  const float e = std::exp(1.0f);
  ExpectNear(RunCpu(g, {1, 1, 1, 1, 2, 2, 2, 2}, 1), {1 / (1 + e), e / (1 + e)});
}

TEST(CpuOps, ReshapeWithZeroAndMinusOneThenSoftmaxAxis1) {
  Graph g = OneInput({2, 2});
  AddInts(g, "shape", {0, -1});
  g.nodes.push_back({OpType::kReshape, "rs", {"x", "shape"}, {"r"}, {}});
  g.nodes.push_back({OpType::kSoftmax, "sm", {"r"}, {"y"}, {{"axis", int64_t{1}}}});
  const std::vector<float> y = RunCpu(g, {0, 0, 0, 0, 1, 1, 1, 1}, 2);
  ExpectNear(y, {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f});
}

TEST(CpuOps, FlattenOfConvOutputKeepsChannelMajorOrder) {
  // The conv's output is channel-blocked inside oneDNN; Flatten must see NCHW order.
  Graph g = OneInput({1, 2, 2});
  AddInit(g, "W", {3, 1, 1, 1}, {1, 10, 100});
  g.nodes.push_back({OpType::kConv, "conv", {"x", "W"}, {"c"}, {}});
  g.nodes.push_back({OpType::kFlatten, "flat", {"c"}, {"y"}, {}});
  ExpectNear(RunCpu(g, {1, 2, 3, 4}, 1), {1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400});
}

}  // namespace
}  // namespace shoal::inference
