// Graph validation, shape inference and its errors, BN folding and SetWeights.
#include <gtest/gtest.h>

#include "shoal/serving/graph/architectures_graph.h"
#include "test_graphs.h"

namespace shoal::inference {
namespace {

using testing::AddInit;
using testing::AddInts;
using testing::OneInput;

using Shape = std::vector<int64_t>;

Shape OutputShape(Graph g, int64_t batch = 2) {
  const Status v = g.Validate();
  EXPECT_TRUE(v.ok()) << v.ToString();
  auto s = g.InferShapes(batch);
  EXPECT_TRUE(s.ok());
  return s.ok() ? s->at(g.outputs[0].name) : Shape{};
}

void ExpectError(Graph g, const std::string& needle) {
  const Status s = g.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

Node ConvNode(std::map<std::string, AttributeValue> attrs) {
  return {OpType::kConv, "conv7", {"x", "W"}, {"y"}, std::move(attrs)};
}

TEST(GraphShapes, ConvPadsStridesDilationsGroup) {
  Graph g = OneInput({4, 10, 9});
  AddInit(g, "W", {6, 2, 3, 3}, std::vector<float>(108));
  g.nodes.push_back(ConvNode({{"pads", Shape{1, 0, 2, 1}},
                              {"strides", Shape{2, 3}},
                              {"dilations", Shape{2, 1}},
                              {"group", int64_t{2}}}));
  // H: (10+1+2-5)/2+1 = 5; W: (9+0+1-3)/3+1 = 3
  EXPECT_EQ(OutputShape(g), (Shape{2, 6, 5, 3}));
}

TEST(GraphShapes, PoolsGemmFlattenReshapeSoftmax) {
  Graph g = OneInput({3, 7, 7});
  g.nodes.push_back(
      {OpType::kMaxPool,
       "mp",
       {"x"},
       {"a"},
       {{"kernel_shape", Shape{3, 3}}, {"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}}}});
  g.nodes.push_back({OpType::kAveragePool, "ap", {"a"}, {"b"}, {{"kernel_shape", Shape{2, 2}}}});
  g.nodes.push_back({OpType::kGlobalAveragePool, "gap", {"b"}, {"c"}, {}});
  g.nodes.push_back({OpType::kFlatten, "fl", {"c"}, {"d"}, {{"axis", int64_t{-3}}}});
  AddInit(g, "B", {5, 3}, std::vector<float>(15));
  g.nodes.push_back({OpType::kGemm, "gemm", {"d", "B"}, {"e"}, {{"transB", int64_t{1}}}});
  AddInts(g, "shape", {0, -1, 1});
  g.nodes.push_back({OpType::kReshape, "rs", {"e", "shape"}, {"f"}, {}});
  g.nodes.push_back({OpType::kSoftmax, "sm", {"f"}, {"y"}, {{"axis", int64_t{1}}}});
  Graph v = g;
  ASSERT_TRUE(v.Validate().ok());
  auto s = v.InferShapes(2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->at("a"), (Shape{2, 3, 4, 4}));  // (7+2-3)/2+1
  EXPECT_EQ(s->at("b"), (Shape{2, 3, 3, 3}));
  EXPECT_EQ(s->at("c"), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(s->at("d"), (Shape{2, 3}));
  EXPECT_EQ(s->at("e"), (Shape{2, 5}));
  EXPECT_EQ(s->at("y"), (Shape{2, 5, 1}));
  EXPECT_EQ(v.outputs[0].shape, (Shape{-1, 5, 1}));
}

TEST(GraphShapes, ResNet18) {
  Graph g = ResNetGraph();
  ASSERT_TRUE(g.Validate().ok());
  EXPECT_EQ(OutputShape(g, 3), (Shape{3, 1000}));
  size_t params = 0;
  for (const auto& [name, init] : g.initializers) {
    if (name.find("running") == std::string::npos) params += init.floats.size();
  }
  EXPECT_EQ(params, 11689512u);  // torchvision's resnet18 parameter count
}

TEST(GraphErrors, NameTheNodeAndTensor) {
  {
    Graph g = OneInput({4, 10, 9});
    AddInit(g, "W", {6, 3, 3, 3}, std::vector<float>(162));
    g.nodes.push_back(ConvNode({}));
    ExpectError(g, "node 'conv7' (Conv): weights 'W' [6,3,3,3] expect 3 input channels");
  }
  {
    Graph g = OneInput({4, 2, 2});
    AddInit(g, "W", {1, 4, 5, 5}, std::vector<float>(100));
    g.nodes.push_back(ConvNode({}));
    ExpectError(g, "node 'conv7' (Conv): window 5 is larger than the padded input");
  }
  {
    Graph g = OneInput({4});
    g.nodes.push_back(ConvNode({}));
    AddInit(g, "W", {1, 4, 1, 1}, std::vector<float>(4));
    ExpectError(g, "input 'x' has shape [1,4] but Conv needs 4 dimensions");
  }
  {
    Graph g = OneInput({3});
    AddInit(g, "B", {4, 2}, std::vector<float>(8));
    g.nodes.push_back({OpType::kGemm, "fc", {"x", "B"}, {"y"}, {}});
    ExpectError(g, "node 'fc' (Gemm): A [1,3] and B [4,2] disagree on K (3 vs 4)");
  }
  {
    Graph g = OneInput({6});
    AddInts(g, "s", {-1, -1});
    g.nodes.push_back({OpType::kReshape, "rs", {"x", "s"}, {"y"}, {}});
    ExpectError(g, "node 'rs' (Reshape): shape [-1,-1] has two -1");
  }
  {
    Graph g = OneInput({6});
    AddInts(g, "s", {4, -1});  // moves the batch
    g.nodes.push_back({OpType::kReshape, "rs", {"x", "s"}, {"y"}, {}});
    ExpectError(g, "cannot reshape [1,6]");
  }
  {
    Graph g = OneInput({6});
    g.nodes.push_back({OpType::kSoftmax, "sm", {"x"}, {"y"}, {{"axis", int64_t{2}}}});
    ExpectError(g, "node 'sm' (Softmax): axis 2 out of range for [1,6]");
  }
  {
    Graph g = OneInput({1, 4, 4});
    g.nodes.push_back({OpType::kMaxPool,
                       "mp",
                       {"x"},
                       {"y"},
                       {{"kernel_shape", Shape{2, 2}}, {"ceil_mode", int64_t{1}}}});
    ExpectError(g, "node 'mp' (MaxPool): ceil_mode=1 is not supported");
  }
  {
    Graph g = OneInput({1, 4, 4});
    g.nodes.push_back({OpType::kMaxPool, "mp", {"x"}, {"y"}, {}});
    ExpectError(g, "node 'mp' (MaxPool): kernel_shape is required");
  }
}

TEST(GraphErrors, StructureAndArity) {
  {
    Graph g = OneInput({2});
    g.nodes.push_back({OpType::kRelu, "r", {"ghost"}, {"y"}, {}});
    ExpectError(g, "node 'r' (Relu): input 'ghost' is neither a graph input");
  }
  {
    Graph g = OneInput({2});
    g.nodes.push_back({OpType::kAdd, "a", {"x", "b"}, {"y"}, {}});
    g.nodes.push_back({OpType::kRelu, "b_relu", {"y"}, {"b"}, {}});
    ExpectError(g, "is part of a cycle");
  }
  {
    Graph g = OneInput({2});
    g.nodes.push_back({OpType::kAdd, "a", {"x"}, {"y"}, {}});
    ExpectError(g, "node 'a' (Add): takes 2 inputs, has 1");
  }
  {
    Graph g = OneInput({2});
    g.nodes.push_back({OpType::kRelu, "r1", {"x"}, {"y"}, {}});
    g.nodes.push_back({OpType::kRelu, "r2", {"x"}, {"y"}, {}});
    ExpectError(g, "node 'r2' (Relu): tensor 'y' is produced more than once");
  }
  {
    Graph g = OneInput({2});
    g.outputs[0].name = "nowhere";
    g.nodes.push_back({OpType::kRelu, "r", {"x"}, {"y"}, {}});
    ExpectError(g, "graph output 'nowhere' is not produced by any node");
  }
  {
    Graph g = OneInput({2});
    g.inputs[0].type = DType::kI64;
    g.nodes.push_back({OpType::kRelu, "r", {"x"}, {"y"}, {}});
    ExpectError(g, "graph input 'x' is INT64; only FP32 inputs are supported");
  }
}

TEST(GraphErrors, ValidateSortsNodes) {
  Graph g = OneInput({2});
  g.nodes.push_back({OpType::kRelu, "second", {"h"}, {"y"}, {}});
  g.nodes.push_back({OpType::kRelu, "first", {"x"}, {"h"}, {}});
  ASSERT_TRUE(g.Validate().ok());
  EXPECT_EQ(g.nodes[0].name, "first");
}

TEST(GraphErrors, UnsupportedOperatorNamesOpAndNode) {
  auto op = OpTypeFromName("LSTM", "lstm_1");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().message(), "unsupported operator 'LSTM' (node 'lstm_1')");
  EXPECT_EQ(*OpTypeFromName("GlobalAveragePool", "g"), OpType::kGlobalAveragePool);
}

TEST(GraphWeights, SetWeightsChecksNamesAndSizes) {
  Graph g = MlpGraph(4, {3}, 2);
  Status s = g.SetWeights({{"fc1.weight", std::vector<float>(11)}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor 'fc1.weight': 11 values given, the graph's shape [3,4] holds 12");
  s = g.SetWeights({{"fc9.weight", std::vector<float>(1)}});
  EXPECT_NE(s.message().find("tensor 'fc9.weight' is not an initializer"), std::string::npos);
  // All or nothing: a bad tensor leaves the good one unchanged.
  s = g.SetWeights({{"fc1.bias", {1, 2, 3}}, {"fc2.bias", {1}}});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(g.initializers.at("fc1.bias").floats, (std::vector<float>{0, 0, 0}));
  ASSERT_TRUE(g.SetWeights({{"fc1.bias", {1, 2, 3}}}).ok());
  EXPECT_EQ(g.initializers.at("fc1.bias").floats, (std::vector<float>{1, 2, 3}));
}

TEST(GraphWeights, FoldedWeightsAreRenamedAndSetWeightsSaysSo) {
  Graph g = ResNetGraph({.widths = {4}, .blocks = {1}, .image = 8, .classes = 2});
  ASSERT_TRUE(g.Validate().ok());
  ASSERT_TRUE(FoldBatchNorm(g).ok());
  ASSERT_TRUE(g.Validate().ok());
  EXPECT_EQ(g.initializers.count("conv1.weight"), 0u);
  EXPECT_EQ(g.initializers.count("conv1.weight.bn_folded"), 1u);
  EXPECT_EQ(g.initializers.count("bn1.running_mean"), 0u);
  const Status s = g.SetWeights({{"conv1.weight", std::vector<float>(4 * 27)}});
  EXPECT_NE(s.message().find("folded with a BatchNormalization"), std::string::npos) << s.message();
}

TEST(GraphWeights, FoldBatchNormIntoGemm) {
  Graph g = OneInput({2});
  AddInit(g, "W", {2, 2}, {1, 2, 3, 4});  // transB: rows are output columns
  AddInit(g, "C", {2}, {1, 1});
  AddInit(g, "s", {2}, {2, 1});
  AddInit(g, "b", {2}, {0, 5});
  AddInit(g, "m", {2}, {1, 0});
  AddInit(g, "v", {2}, {1, 4});
  g.nodes.push_back(
      {OpType::kGemm, "fc", {"x", "W", "C"}, {"h"}, {{"transB", int64_t{1}}, {"beta", 2.0f}}});
  g.nodes.push_back(
      {OpType::kBatchNormalization, "bn", {"h", "s", "b", "m", "v"}, {"y"}, {{"epsilon", 0.0f}}});
  const auto unfolded = testing::RunCpu(g, {1, 1}, 1);
  // h = [1+2+2, 3+4+2] = [5, 9]; bn: (5-1)*2+0 = 8, (9-0)*0.5+5 = 9.5
  testing::ExpectNear(unfolded, {8, 9.5f});
  ASSERT_TRUE(FoldBatchNorm(g).ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  testing::ExpectNear(testing::RunCpu(g, {1, 1}, 1), {8, 9.5f});
}

}  // namespace
}  // namespace shoal::inference
