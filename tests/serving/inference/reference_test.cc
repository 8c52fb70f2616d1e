// The CPU executor against PyTorch: models exported once by tests/data/inference/gen_refs.py
// with their inputs and torch's outputs, loaded through Shoal's ONNX reader, and the same nets
// built by Shoal's own architecture builders with the file's weights.
#include <gtest/gtest.h>

#include "reference_files.h"
#include "shoal/serving/graph/architectures_graph.h"
#include "shoal/serving/model/model_graph.h"
#include "shoal/serving/onnx/onnx.h"
#include "test_graphs.h"

namespace shoal::inference {
namespace {

using testing::DataPath;
using testing::MaxAbsDiff;
using testing::ReadFloats;
using testing::RunCpu;

constexpr float kF32Tolerance = 1e-4f;

struct Reference {
  const char* name;
  int64_t batch;
};

class TorchReference : public ::testing::TestWithParam<Reference> {};

TEST_P(TorchReference, OnnxFileMatchesTorch) {
  const Reference r = GetParam();
  auto g = LoadOnnx(DataPath(std::string(r.name) + ".onnx"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto x = ReadFloats(std::string(r.name) + ".input.bin");
  const auto want = ReadFloats(std::string(r.name) + ".output.bin");
  const auto got = RunCpu(*g, x, r.batch);
  EXPECT_LT(MaxAbsDiff(got, want), kF32Tolerance);
  // One sample at a time (a different batch-size plan) gives the same rows.
  const size_t in_per = x.size() / static_cast<size_t>(r.batch);
  const size_t out_per = want.size() / static_cast<size_t>(r.batch);
  for (int64_t b = 0; b < r.batch; ++b) {
    const std::vector<float> xb(x.begin() + static_cast<ptrdiff_t>(b * in_per),
                                x.begin() + static_cast<ptrdiff_t>((b + 1) * in_per));
    const std::vector<float> wb(want.begin() + static_cast<ptrdiff_t>(b * out_per),
                                want.begin() + static_cast<ptrdiff_t>((b + 1) * out_per));
    EXPECT_LT(MaxAbsDiff(RunCpu(*g, xb, 1), wb), kF32Tolerance) << "sample " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TorchReference,
                         ::testing::Values(Reference{"mlp", 4}, Reference{"cnn", 3},
                                           Reference{"resnet", 2}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TorchReference, ResNetFoldedEqualsUnfolded) {
  auto unfolded = LoadOnnx(DataPath("resnet.onnx"), {.fold_batchnorm = false});
  ASSERT_TRUE(unfolded.ok()) << unfolded.status().ToString();
  size_t bn = 0;
  for (const Node& n : unfolded->nodes) bn += n.op == OpType::kBatchNormalization ? 1 : 0;
  EXPECT_EQ(bn, 6u);
  Graph folded = *unfolded;
  ASSERT_TRUE(FoldBatchNorm(folded).ok());
  for (const Node& n : folded.nodes) EXPECT_NE(n.op, OpType::kBatchNormalization) << n.name;
  const auto x = ReadFloats("resnet.input.bin");
  const auto a = RunCpu(*unfolded, x, 2);
  const auto b = RunCpu(folded, x, 2);
  EXPECT_LT(MaxAbsDiff(a, b), 1e-5f);
  EXPECT_LT(MaxAbsDiff(a, ReadFloats("resnet.output.bin")), kF32Tolerance);
}

// Shoal's own builders, given the file's tensors by name, compute what torch computed: the
// builders' topology and tensor names are PyTorch's.
std::map<std::string, std::vector<float>, std::less<>> FloatInitializers(const Graph& g) {
  std::map<std::string, std::vector<float>, std::less<>> w;
  for (const auto& [name, init] : g.initializers) {
    if (!init.is_int()) w[name] = init.floats;
  }
  return w;
}

TEST(TorchReference, ResNetBuilderWithFileWeights) {
  auto file = LoadOnnx(DataPath("resnet.onnx"), {.fold_batchnorm = false});
  ASSERT_TRUE(file.ok());
  Graph g = ResNetGraph({.widths = {8, 16},
                         .blocks = {1, 1},
                         .image = 32,
                         .classes = 10,
                         .small_stem = true,
                         .seed = 7});
  ASSERT_TRUE(g.SetWeights(FloatInitializers(*file)).ok());
  ASSERT_TRUE(g.Validate().ok());
  ASSERT_TRUE(FoldBatchNorm(g).ok());
  EXPECT_LT(
      MaxAbsDiff(RunCpu(g, ReadFloats("resnet.input.bin"), 2), ReadFloats("resnet.output.bin")),
      kF32Tolerance);
}

model::Model ModelFrom(const model::ModelSpec& spec, const Graph& g) {
  model::Model m(spec);
  for (size_t i = 0; i < spec.size(); ++i) {
    const auto& v = g.initializers.at(spec.tensor(i).name).floats;
    std::copy(v.begin(), v.end(), m.tensor(i).begin());
  }
  return m;
}

TEST(TorchReference, FlArchitecturesWithFileWeights) {
  struct Case {
    const char* name;
    model::ArchitectureOptions options;
    int64_t batch;
  };
  for (const Case& c : {Case{"mlp", {}, 4}, Case{"cnn", {.hidden = {8}}, 3}}) {
    auto file = LoadOnnx(DataPath(std::string(c.name) + ".onnx"));
    ASSERT_TRUE(file.ok());
    auto spec = model::ArchitectureSpec(c.name, c.options);
    ASSERT_TRUE(spec.ok());
    auto g = GraphFromArchitecture(c.name, c.options, ModelFrom(*spec, *file));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_LT(MaxAbsDiff(RunCpu(*g, ReadFloats(std::string(c.name) + ".input.bin"), c.batch),
                         ReadFloats(std::string(c.name) + ".output.bin")),
              kF32Tolerance)
        << c.name;
  }
}

// The protobuf-free path the CUDA executor's tests take: builders plus <model>.weights.bin.
TEST(TorchReference, BuildersWithWeightsFiles) {
  struct Case {
    const char* name;
    Graph graph;
    int64_t batch;
  };
  for (Case& c : std::vector<Case>{{"mlp", MlpGraph(784, {128}, 10), 4},
                                   {"cnn", CnnGraph(8, 10), 3},
                                   {"resnet",
                                    ResNetGraph({.widths = {8, 16},
                                    .blocks = {1, 1},
                                    .image = 32,
                                    .classes = 10,
                                    .small_stem = true}),
                                    2}}) {
    auto w = testing::ReadReferenceWeights(DataPath(std::string(c.name) + ".weights.bin"));
    ASSERT_FALSE(w.empty()) << c.name;
    // torch's state dict also holds BN's num_batches_tracked (int64, not written) only.
    ASSERT_TRUE(c.graph.SetWeights(w).ok()) << c.name;
    ASSERT_TRUE(c.graph.Validate().ok());
    ASSERT_TRUE(FoldBatchNorm(c.graph).ok());
    EXPECT_LT(MaxAbsDiff(RunCpu(c.graph, ReadFloats(std::string(c.name) + ".input.bin"), c.batch),
                         ReadFloats(std::string(c.name) + ".output.bin")),
              kF32Tolerance)
        << c.name;
  }
}

TEST(TorchReference, Bf16IsCloseOrUnavailableWithAReason) {
  auto g = LoadOnnx(DataPath("mlp.onnx"));
  ASSERT_TRUE(g.ok());
  auto ex = CreateExecutor("cpu");
  ASSERT_TRUE(ex.ok());
  auto exe = (*ex)->Compile(*g, {.precision = Precision::kBF16, .max_batch = 4});
  if (!exe.ok()) {
    EXPECT_EQ(exe.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(exe.status().message().find("bf16"), std::string::npos) << exe.status().message();
    GTEST_SKIP() << exe.status().message();
  }
  const auto x = ReadFloats("mlp.input.bin");
  const auto want = ReadFloats("mlp.output.bin");
  std::vector<float> y(want.size());
  ASSERT_TRUE((*exe)->Run({x, y, 4}).ok());
  EXPECT_LT(MaxAbsDiff(y, want), 0.1f);  // bf16 keeps 8 bits of mantissa
  EXPECT_GT(MaxAbsDiff(y, want), 0.0f);  // and it really ran in bf16
}

}  // namespace
}  // namespace shoal::inference
