// The plain kernels (shoal/serving/graph/ops.h) and the per-batch constant folder
// (fold_constants.h), one operator at a time with hand-checked values, through the CPU executor.
#include <gtest/gtest.h>

#include "shoal/serving/graph/fold_constants.h"
#include "test_graphs.h"

namespace shoal::inference {
namespace {

using testing::AddInit;
using testing::AddInts;
using testing::OneInput;
using testing::RunCpu;
using Shape = std::vector<int64_t>;

// x [N,6] -> Shape -> Gather(0) -> Unsqueeze -> Concat with [2,3] -> Reshape(x, [N,2,3]):
// folds to a constant per batch; only the Reshape runs.
Graph ShapeSubgraph() {
  Graph g = OneInput({6});
  AddInts(g, "zero", {0});
  g.initializers["zero"].shape = {};
  AddInts(g, "axes0", {0});
  AddInts(g, "rest", {2, 3});
  g.nodes.push_back({OpType::kShape, "shape", {"x"}, {"s"}, {}});
  g.nodes.push_back({OpType::kGather, "batch", {"s", "zero"}, {"n"}, {}});
  g.nodes.push_back({OpType::kUnsqueeze, "n1", {"n", "axes0"}, {"n_1"}, {}});
  g.nodes.push_back({OpType::kConcat, "cat", {"n_1", "rest"}, {"target"}, {{"axis", int64_t{0}}}});
  g.nodes.push_back({OpType::kReshape, "rs", {"x", "target"}, {"r"}, {}});
  g.nodes.push_back({OpType::kTranspose, "t", {"r"}, {"y"}, {{"perm", Shape{0, 2, 1}}}});
  return g;
}

TEST(Ops, ShapeSubgraphFoldsPerBatch) {
  Graph g = ShapeSubgraph();
  ASSERT_TRUE(g.Validate().ok());
  auto f = FoldConstants(g, 3);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->nodes.size(), 2u);
  EXPECT_EQ(f->nodes[0].name, "rs");
  EXPECT_EQ(f->constants.at("target").ints, (Shape{3, 2, 3}));
  EXPECT_EQ(f->shapes.at("y"), (Shape{3, 3, 2}));
  // Batch 2: [[0..5], [6..11]] -> [2,2,3] -> transposed [2,3,2].
  std::vector<float> x(12);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  EXPECT_EQ(RunCpu(g, x, 2), (std::vector<float>{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11}));
}

TEST(Ops, SliceNegativeStepGatherNegativeIndexWhereBroadcast) {
  Graph g = OneInput({5});
  AddInts(g, "st", {-1});
  AddInts(g, "en", {-100});  // clamped to before the first element
  AddInts(g, "ax", {1});
  AddInts(g, "step", {-2});
  AddInts(g, "idx", {-1, 0});
  AddInit(g, "cond", {2}, {1, 0});
  AddInit(g, "other", {}, {-7});
  g.nodes.push_back({OpType::kSlice, "sl", {"x", "st", "en", "ax", "step"}, {"s"}, {}});
  g.nodes.push_back({OpType::kGather, "ga", {"s", "idx"}, {"gt"}, {{"axis", int64_t{1}}}});
  g.nodes.push_back({OpType::kWhere, "wh", {"cond", "gt", "other"}, {"y"}, {}});
  // x = 1..5: slice [::-2] over axis 1 = {5,3,1}; gather [-1,0] = {1,5}; where {1,0} = {1,-7}.
  EXPECT_EQ(RunCpu(g, {1, 2, 3, 4, 5}, 1), (std::vector<float>{1, -7}));
}

TEST(Ops, SplitUnequalAndReduceMean) {
  Graph g = OneInput({6});
  AddInts(g, "parts", {2, 4});
  AddInts(g, "axes", {1});
  g.nodes.push_back({OpType::kSplit, "sp", {"x", "parts"}, {"a", "b"}, {{"axis", int64_t{1}}}});
  g.nodes.push_back({OpType::kReduceMean, "ma", {"a"}, {"ma_o"}, {{"axes", Shape{1}}}});
  g.nodes.push_back({OpType::kReduceMean, "mb", {"b", "axes"}, {"mb_o"}, {}});
  g.nodes.push_back({OpType::kSub, "d", {"mb_o", "ma_o"}, {"y"}, {}});
  // mean(3,4,5,6) - mean(1,2) = 4.5 - 1.5 = 3 per row.
  EXPECT_EQ(RunCpu(g, {1, 2, 3, 4, 5, 6, 2, 2, 8, 8, 8, 8}, 2), (std::vector<float>{3, 6}));
}

TEST(Ops, ErrorsNameTheNode) {
  {
    Graph g = OneInput({2, 3});
    g.nodes.push_back({OpType::kTranspose, "tp", {"x"}, {"y"}, {{"perm", Shape{0, 1, 1}}}});
    EXPECT_EQ(g.Validate().message(), "node 'tp' (Transpose): perm [0,1,1] is not a permutation");
  }
  {
    Graph g = OneInput({4});
    AddInts(g, "starts", {0});
    g.nodes.push_back({OpType::kRelu, "r", {"x"}, {"ends"}, {}});
    g.nodes.push_back({OpType::kSlice, "sl", {"x", "starts", "ends"}, {"y"}, {}});
    EXPECT_EQ(g.Validate().message(),
              "node 'sl' (Slice): ends 'ends' must be a constant (or computed from shapes only)");
  }
  auto op = OpTypeFromName("Einsum", "attn/einsum");
  EXPECT_EQ(op.status().message(), "unsupported operator 'Einsum' (node 'attn/einsum')");
}

}  // namespace
}  // namespace shoal::inference
