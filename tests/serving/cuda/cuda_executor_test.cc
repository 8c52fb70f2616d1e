// The CUDA executor against hand-computed values (the same cases as the CPU executor's tests),
// fp16/bf16 against fp32, every batch bucket (padding a batch up to its bucket must not change
// any sample's answer), and the CPU executor on a small ResNet and the FL MLP.
#include "shoal/serving/cuda/cuda_executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../inference/reference_files.h"
#include "../inference/test_graphs.h"
#include "shoal/serving/executor/executor.h"
#include "shoal/serving/graph/architectures_graph.h"
#include "tests/support/gpu_test_skip.h"

namespace shoal::inference {
namespace {

using testing::AddInit;
using testing::AddInts;
using testing::OneInput;
using testing::PaddedStridedConv;
using testing::RunOn;

// Skips the test with the reason when no device is usable; fp32 tests compare exactly enough
// only without TF32, so it is turned off for this process.
// Skips only where no device is visible (gpu_test_skip.h): with a device node present, a CUDA
// module that fails to load or a driver/runtime mismatch fails, as does any skip under
// SHOAL_REQUIRE_GPU=1.
#define SKIP_WITHOUT_GPU()                                  \
  do {                                                      \
    setenv("SHOAL_CUDA_NO_TF32", "1", 1);                   \
    auto ex_ = CreateCudaExecutor();                        \
    if (!ex_.ok()) SHOAL_GPU_SKIP(ex_.status().ToString()); \
  } while (0)

std::vector<float> RunCuda(Graph g, const std::vector<float>& input, int64_t batch,
                           ExecutorOptions options = {}) {
  return RunOn("cuda", std::move(g), input, batch, options);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float atol,
                float rtol = 0) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 10; ++i) {
    const float tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ++bad;
      EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
    }
  }
}

// Without a device the module still loads and says so; a module that fails to load (or any
// other reason) fails here even on a machine without a GPU.
TEST(CudaExecutor, UnavailableWithoutDeviceNamesTheReason) {
  auto ex = CreateCudaExecutor();
  if (ex.ok()) GTEST_SKIP() << "a CUDA device is present";
  ASSERT_TRUE(::shoal::gpu_test::SkipForbidden().empty())
      << ex.status().ToString() << " [" << ::shoal::gpu_test::SkipForbidden() << "]";
  EXPECT_EQ(ex.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(ex.status().message().rfind("no CUDA device: ", 0), 0u) << ex.status().message();
}

TEST(CudaExecutor, GemmTransBWithBiasAndAlphaBeta) {
  SKIP_WITHOUT_GPU();
  Graph g = OneInput({2});
  AddInit(g, "W", {3, 2}, {1, 2, 3, 4, 5, 6});
  AddInit(g, "b", {3}, {0.5f, -1, 2});
  g.nodes.push_back({OpType::kGemm,
                     "fc",
                     {"x", "W", "b"},
                     {"y"},
                     {{"transB", int64_t{1}}, {"alpha", 2.0f}, {"beta", 0.5f}}});
  ExpectNear(RunCuda(g, {1, -1, 0, 2}, 2), {-1.75f, -2.5f, -1.0f, 8.25f, 15.5f, 25.0f}, 1e-5f);
}

TEST(CudaExecutor, GemmFusedReluAndMatMulAddConstant) {
  SKIP_WITHOUT_GPU();
  Graph g = OneInput({2});
  AddInit(g, "W", {2, 2}, {1, -1, 2, -2});
  g.nodes.push_back({OpType::kGemm, "fc", {"x", "W"}, {"h"}, {}});
  g.nodes.push_back({OpType::kRelu, "relu", {"h"}, {"y"}, {}});
  ExpectNear(RunCuda(g, {1, 1}, 1), {3, 0}, 1e-5f);

  Graph m = OneInput({3});
  AddInit(m, "B", {3, 1}, {1, 2, 3});
  AddInit(m, "c", {1}, {10});
  m.nodes.push_back({OpType::kMatMul, "mm", {"x", "B"}, {"m"}, {}});
  m.nodes.push_back({OpType::kAdd, "add", {"c", "m"}, {"y"}, {}});
  ExpectNear(RunCuda(m, {1, 1, 1, 1, 0, -1}, 2), {16, 8}, 1e-5f);
}

TEST(CudaExecutor, AddTwoRuntimeTensorsAndRelu) {
  SKIP_WITHOUT_GPU();
  Graph g = OneInput({4});
  g.nodes.push_back({OpType::kRelu, "r", {"x"}, {"rx"}, {}});
  g.nodes.push_back({OpType::kAdd, "add", {"x", "rx"}, {"y"}, {}});
  ExpectNear(RunCuda(g, {-1, 2, -3, 4}, 1), {-1, 4, -3, 8}, 1e-6f);
}

TEST(CudaExecutor, ConvSymmetricPadsStridesBiasAndResidualRelu) {
  SKIP_WITHOUT_GPU();
  Graph g = OneInput({1, 3, 3});
  AddInit(g, "W", {1, 1, 3, 3}, {0, 0, 0, 0, 1, 0, 0, 0, 0});  // identity
  AddInit(g, "b", {1}, {-5});
  g.nodes.push_back({OpType::kConv,
                     "conv",
                     {"x", "W", "b"},
                     {"c"},
                     {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  g.nodes.push_back({OpType::kAdd, "add", {"c", "x"}, {"s"}, {}});  // residual: 2x - 5
  g.nodes.push_back({OpType::kRelu, "relu", {"s"}, {"y"}, {}});
  ExpectNear(RunCuda(g, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1), {0, 0, 1, 3, 5, 7, 9, 11, 13}, 1e-5f);

  Graph s = OneInput({1, 3, 3});
  AddInit(s, "W", {1, 1, 2, 2}, {1, 1, 1, 1});
  s.nodes.push_back(
      {OpType::kConv, "conv", {"x", "W"}, {"y"}, {{"strides", std::vector<int64_t>{1, 1}}}});
  // 2x2 window sums over 1..9: 12 16 24 28
  ExpectNear(RunCuda(s, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1), {12, 16, 24, 28}, 1e-5f);
}

TEST(CudaExecutor, ConvAsymmetricPadsThroughThePadKernel) {
  SKIP_WITHOUT_GPU();
  const Graph g = PaddedStridedConv();
  for (int64_t batch : {1, 3}) {
    std::vector<float> x, want;
    for (int64_t b = 0; b < batch; ++b) {
      for (int v = 1; v <= 9; ++v) x.push_back(static_cast<float>(v));
      want.insert(want.end(), {101, 105, 111, 128});
    }
    ExecutorOptions o;
    o.max_batch = 4;
    ExpectNear(RunCuda(g, x, batch, o), want, 1e-4f);
  }
}

TEST(CudaExecutor, ConvGroupsDilationAndFlattenOrder) {
  SKIP_WITHOUT_GPU();
  Graph g = OneInput({2, 3, 3});
  AddInit(g, "W", {2, 1, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2});
  g.nodes.push_back({OpType::kConv,
                     "conv",
                     {"x", "W"},
                     {"y"},
                     {{"group", int64_t{2}}, {"dilations", std::vector<int64_t>{2, 2}}}});
  std::vector<float> x(18);
  for (size_t i = 0; i < 18; ++i) x[i] = static_cast<float>(i);
  ExpectNear(RunCuda(g, x, 1), {16, 104}, 1e-4f);

  // Channels-last storage inside; Flatten must still give NCHW order.
  Graph f = OneInput({1, 2, 2});
  AddInit(f, "W", {3, 1, 1, 1}, {1, 10, 100});
  f.nodes.push_back({OpType::kConv, "conv", {"x", "W"}, {"c"}, {}});
  f.nodes.push_back({OpType::kFlatten, "flat", {"c"}, {"y"}, {}});
  ExpectNear(RunCuda(f, {1, 2, 3, 4}, 1), {1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400}, 1e-4f);
}

TEST(CudaExecutor, BatchNormalizationPoolsAndSoftmax) {
  SKIP_WITHOUT_GPU();
  Graph bn = OneInput({2, 1, 1});
  AddInit(bn, "s", {2}, {2, 1});
  AddInit(bn, "b", {2}, {1, 0});
  AddInit(bn, "m", {2}, {1, -1});
  AddInit(bn, "v", {2}, {4, 1});
  bn.nodes.push_back(
      {OpType::kBatchNormalization, "bn", {"x", "s", "b", "m", "v"}, {"y"}, {{"epsilon", 0.0f}}});
  ExpectNear(RunCuda(bn, {5, 1}, 1), {5, 2}, 1e-5f);

  Graph mp = OneInput({1, 2, 3});
  mp.nodes.push_back({OpType::kMaxPool,
                      "pool",
                      {"x"},
                      {"y"},
                      {{"kernel_shape", std::vector<int64_t>{2, 2}},
                       {"strides", std::vector<int64_t>{2, 2}},
                       {"pads", std::vector<int64_t>{0, 1, 0, 0}}}});
  ExpectNear(RunCuda(mp, {-1, -2, -3, -4, -5, -6}, 1), {-1, -2}, 0);

  for (int64_t include : {0, 1}) {
    Graph ap = OneInput({1, 2, 2});
    ap.nodes.push_back({OpType::kAveragePool,
                        "pool",
                        {"x"},
                        {"y"},
                        {{"kernel_shape", std::vector<int64_t>{2, 2}},
                         {"pads", std::vector<int64_t>{1, 1, 0, 0}},
                         {"strides", std::vector<int64_t>{2, 2}},
                         {"count_include_pad", include}}});
    ExpectNear(RunCuda(ap, {4, 8, 8, 8}, 1), {include ? 1.0f : 4.0f}, 1e-6f);
  }

  Graph sm = OneInput({2, 2, 2});
  sm.nodes.push_back({OpType::kGlobalAveragePool, "gap", {"x"}, {"p"}, {}});
  sm.nodes.push_back({OpType::kFlatten, "flat", {"p"}, {"f"}, {}});
  sm.nodes.push_back({OpType::kSoftmax, "sm", {"f"}, {"y"}, {}});
  const float e = std::exp(1.0f);
  ExpectNear(RunCuda(sm, {1, 1, 1, 1, 2, 2, 2, 2}, 1), {1 / (1 + e), e / (1 + e)}, 1e-5f);

  Graph rs = OneInput({2, 2});
  AddInts(rs, "shape", {0, -1});
  rs.nodes.push_back({OpType::kReshape, "rs", {"x", "shape"}, {"r"}, {}});
  rs.nodes.push_back({OpType::kSoftmax, "sm", {"r"}, {"y"}, {{"axis", int64_t{1}}}});
  ExpectNear(RunCuda(rs, {0, 0, 0, 0, 1, 1, 1, 1}, 2), std::vector<float>(8, 0.25f), 1e-6f);
}

TEST(CudaExecutor, RefusesBadBatchesAndSpans) {
  SKIP_WITHOUT_GPU();
  Graph g = OneInput({2});
  AddInit(g, "W", {2, 2}, {1, 0, 0, 1});
  g.nodes.push_back({OpType::kGemm, "fc", {"x", "W"}, {"y"}, {}});
  ASSERT_TRUE(g.Validate().ok());
  auto ex = CreateCudaExecutor();
  ASSERT_TRUE(ex.ok());
  ExecutorOptions o;
  o.max_batch = 4;
  auto exe = (*ex)->Compile(g, o);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  std::vector<float> in(10), out(10);
  EXPECT_EQ((*exe)->Run({std::span(in).first(0), std::span(out).first(0), 0}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*exe)->Run({std::span(in).first(10), std::span(out).first(10), 5}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*exe)->Run({std::span(in).first(3), std::span(out).first(4), 2}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*exe)->Run({std::span(in).first(6), std::span(out).first(6), 3}).ok());
}

std::vector<float> RandomInput(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Random weights for every float initializer (the builders start from zeros or a seed).
void RandomWeights(Graph& g, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& [name, init] : g.initializers) {
    if (init.is_int()) continue;
    for (float& v : init.floats) v = scale * d(rng);
  }
}

TEST(CudaExecutor, EveryBucketGivesEachSampleTheSameAnswer) {
  SKIP_WITHOUT_GPU();
  Graph g = MlpGraph(20, {32, 16}, 5);
  RandomWeights(g, 3, 0.3f);
  ASSERT_TRUE(g.Validate().ok());
  ExecutorOptions o;
  o.max_batch = 12;  // buckets 1 2 4 8 12
  const auto x = RandomInput(12 * 20, 9);
  const std::vector<float> all = RunCuda(g, x, 12, o);
  for (int64_t b : {1, 2, 3, 5, 8, 11}) {
    const std::vector<float> part(x.begin(), x.begin() + b * 20);
    const std::vector<float> want(all.begin(), all.begin() + b * 5);
    ExpectNear(RunCuda(g, part, b, o), want, 1e-5f, 1e-5f);
  }
}

TEST(CudaExecutor, HalfPrecisionsTrackFp32OnASmallResNet) {
  SKIP_WITHOUT_GPU();
  ResNetOptions r;
  r.widths = {8, 16, 16, 32};
  r.blocks = {1, 1, 1, 1};
  r.image = 32;
  r.classes = 10;
  r.small_stem = true;
  Graph g = ResNetGraph(r);
  ASSERT_TRUE(g.Validate().ok());
  ExecutorOptions o;
  o.max_batch = 4;
  const auto x = RandomInput(4 * 3 * 32 * 32, 5);
  const std::vector<float> f32 = RunCuda(g, x, 4, o);
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    o.precision = p;
    // bf16 keeps 8 bits of mantissa: a few percent of the logits' scale.
    float scale = 0;
    for (float v : f32) scale = std::max(scale, std::fabs(v));
    const float tol = (p == Precision::kF16 ? 0.02f : 0.08f) * (scale + 1);
    ExpectNear(RunCuda(g, x, 4, o), f32, tol);
  }
}

// ---- Checked-in references ----------------------------------------------------------------
// The GPU machine has neither oneDNN nor the ONNX reader, so the CUDA executor is checked there
// against outputs the CPU executor (itself checked against PyTorch in reference_test.cc)
// computed once for graphs both machines build identically: Shoal's builders with weights and
// inputs from std::mt19937_64, whose sequence the standard fixes, turned into floats by hand.
// SHOAL_WRITE_CUDA_REFS=1 rewrites tests/data/inference/cuda_ref_*.bin from the CPU executor.

std::vector<float> Deterministic(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * (static_cast<float>(gen() >> 40) * 0x1p-24f);
  return v;
}

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the builders that start from zeros (mlp, cnn).
void FillDeterministic(Graph& g, uint64_t seed) {
  for (auto& [name, init] : g.initializers) {
    if (init.is_int()) continue;
    int64_t fan_in = 1;
    for (size_t d = 1; d < init.shape.size(); ++d) fan_in *= init.shape[d];
    if (init.shape.size() == 1) fan_in = 64;
    const float b = 1.0f / std::sqrt(static_cast<float>(fan_in));
    init.floats = Deterministic(init.floats.size(), seed++, -b, b);
  }
}

struct RefCase {
  std::string name;
  Graph graph;
  int64_t batch;
};

std::vector<RefCase> RefCases() {
  std::vector<RefCase> cases;
  ResNetOptions r;  // the ImageNet stem (7x7/2 conv, 3x3/2 max-pool), BasicBlocks, downsamples
  r.widths = {16, 32, 32, 64};
  r.image = 64;
  r.classes = 10;
  r.seed = 7;
  cases.push_back({"resnet", ResNetGraph(r), 3});
  Graph cnn = CnnGraph(32, 10);  // Flatten of a 12x12 map: channels-last back to NCHW order
  FillDeterministic(cnn, 100);
  cases.push_back({"cnn", std::move(cnn), 5});
  Graph mlp = MlpGraph(784, {128, 64}, 10);
  FillDeterministic(mlp, 200);
  cases.push_back({"mlp", std::move(mlp), 37});
  for (RefCase& c : cases) EXPECT_TRUE(c.graph.Validate().ok()) << c.name;
  return cases;
}

std::vector<float> RefInput(const RefCase& c) {
  int64_t per = 1;
  for (size_t d = 1; d < c.graph.inputs[0].shape.size(); ++d) per *= c.graph.inputs[0].shape[d];
  return Deterministic(static_cast<size_t>(per * c.batch), 42, -1.0f, 1.0f);
}

std::string RefPath(const std::string& name, const char* what) {
  return std::string(SHOAL_INFERENCE_TEST_DATA) + "/cuda_ref_" + name + "." + what + ".bin";
}

bool ReadRef(const std::string& path, std::vector<float>& out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in.good()) return false;
  out.resize(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
  return in.good();
}

TEST(CudaExecutor, MatchesCheckedInCpuReferences) {
  SKIP_WITHOUT_GPU();
  // Both convolution paths: cuDNN + Shoal's epilogue (default) and cuDNN's fused
  // conv + bias + residual + ReLU (SHOAL_CUDNN_FUSED=1).
  for (const char* fused : {"0", "1"}) {
    setenv("SHOAL_CUDNN_FUSED", fused, 1);
    std::printf("SHOAL_CUDNN_FUSED=%s\n", fused);
    for (const RefCase& c : RefCases()) {
      std::vector<float> x, want;
      ASSERT_TRUE(ReadRef(RefPath(c.name, "input"), x)) << RefPath(c.name, "input");
      ASSERT_TRUE(ReadRef(RefPath(c.name, "output"), want)) << RefPath(c.name, "output");
      EXPECT_EQ(x, RefInput(c)) << c.name << ": the reference input is not this test's input";
      ExecutorOptions o;
      o.max_batch = 64;
      float scale = 0;
      for (float v : want) scale = std::max(scale, std::fabs(v));
      const std::vector<float> got = RunCuda(c.graph, x, c.batch, o);
      ExpectNear(got, want, 1e-4f * (1 + scale), 1e-4f);
      // fp16 and bf16 stay close to the fp32 reference too (their own rounding).
      o.precision = Precision::kF16;
      ExpectNear(RunCuda(c.graph, x, c.batch, o), want, 0.005f + 0.02f * scale);
      o.precision = Precision::kBF16;
      ExpectNear(RunCuda(c.graph, x, c.batch, o), want, 0.02f + 0.1f * scale);
    }
  }
  unsetenv("SHOAL_CUDNN_FUSED");
}

// PyTorch's own outputs (tests/data/inference/gen_refs.py): the builders with torch's weights
// from <model>.weights.bin, read without protobuf, as reference_test.cc does on the CPU.
TEST(CudaExecutor, MatchesPyTorchReferences) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* name;
    Graph graph;
    int64_t batch;
  };
  ResNetOptions r;
  r.widths = {8, 16};
  r.blocks = {1, 1};
  r.image = 32;
  r.classes = 10;
  r.small_stem = true;
  std::vector<Case> cases;
  cases.push_back({"mlp", MlpGraph(784, {128}, 10), 4});
  cases.push_back({"cnn", CnnGraph(8, 10), 3});
  cases.push_back({"resnet", ResNetGraph(r), 2});
  for (Case& c : cases) {
    const std::string name = c.name;
    auto w = testing::ReadReferenceWeights(testing::DataPath(name + ".weights.bin"));
    ASSERT_FALSE(w.empty()) << name;
    ASSERT_TRUE(c.graph.SetWeights(w).ok()) << name;
    ASSERT_TRUE(c.graph.Validate().ok()) << name;
    const std::vector<float> x = testing::ReadFloats(name + ".input.bin");
    const std::vector<float> want = testing::ReadFloats(name + ".output.bin");
    ExecutorOptions o;
    o.max_batch = 8;
    std::printf("%s fp32\n", c.name);
    ExpectNear(RunCuda(c.graph, x, c.batch, o), want, 1e-4f, 1e-4f);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    o.precision = Precision::kF16;
    std::printf("%s fp16\n", c.name);
    ExpectNear(RunCuda(c.graph, x, c.batch, o), want, 0.005f + 0.02f * scale);
  }
}

// y = W x for a [n, k] weight whose values (multiples of 1/64 in [-1, 1]) and inputs (multiples
// of 1/8 in [-1, 1]) are exact in fp16 and bf16: every product is exact and so is the fp32
// accumulation, so the only error left is rounding the output to the compute type.
struct ExactGemm {
  Graph graph;
  std::vector<float> x;     // `batch` samples
  std::vector<float> want;  // computed here in double
  int64_t batch = 0;
};
ExactGemm MakeExactGemm(int64_t k, int64_t n, int64_t batch) {
  ExactGemm c;
  c.batch = batch;
  c.graph = OneInput({k});
  std::vector<float> w(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(int(i * 37 % 129) - 64) / 64.0f;
  c.x.resize(static_cast<size_t>(batch * k));
  for (size_t i = 0; i < c.x.size(); ++i) c.x[i] = static_cast<float>(int(i * 11 % 17) - 8) / 8.0f;
  c.want.assign(static_cast<size_t>(batch * n), 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) {
        acc += double(w[static_cast<size_t>(r * k + j)]) * c.x[static_cast<size_t>(b * k + j)];
      }
      c.want[static_cast<size_t>(b * n + r)] = static_cast<float>(acc);
    }
  }
  AddInit(c.graph, "W", {n, k}, std::move(w));
  c.graph.nodes.push_back({OpType::kGemm, "fc", {"x", "W"}, {"y"}, {{"transB", int64_t{1}}}});
  return c;
}

// The weights are uploaded on the executor's stream and the first Run reads them whole: a large
// weight (32 MiB of f32 from pageable memory, cast on the device for fp16/bf16), run at once
// after Compile, equals the exact answer to within the output's rounding, in every precision.
// (The old upload copied with cudaMemcpy on the legacy stream, which the executor's non-blocking
// stream does not wait for: a kernel could read weights still being copied. A race is not
// certain to show in one run; this is where it would.)
TEST(CudaExecutor, WeightsAreWholeOnTheFirstRunInEveryPrecision) {
  SKIP_WITHOUT_GPU();
  const ExactGemm c = MakeExactGemm(4096, 2048, 3);
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    ExecutorOptions o;
    o.precision = p;
    o.max_batch = 4;
    const float rel = p == Precision::kF32 ? 1e-6f : (p == Precision::kF16 ? 1e-3f : 8e-3f);
    ExpectNear(RunCuda(c.graph, c.x, c.batch, o), c.want, 1e-3f, rel);
  }
}

// Every batch-size bucket is captured as a CUDA graph when the executable is compiled, not in
// Run; SHOAL_CUDA_GRAPHS=0 runs every bucket eagerly and says so.
TEST(CudaExecutor, CapturesEveryBucketAtCompile) {
  SKIP_WITHOUT_GPU();
  const ExactGemm c = MakeExactGemm(64, 32, 5);
  ExecutorOptions o;
  o.max_batch = 8;  // buckets 1, 2, 4, 8
  auto ex = CreateExecutor("cuda");
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  auto exe = (*ex)->Compile(c.graph, o);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  ExecutionMode m = (*exe)->execution_mode();
  EXPECT_EQ(m.graph_buckets, 4);
  EXPECT_EQ(m.eager_buckets, 0);
  EXPECT_EQ(m.eager_reason, "");
  std::vector<float> out(c.want.size());
  ASSERT_TRUE((*exe)->Run({c.x, out, c.batch}).ok());
  ExpectNear(out, c.want, 1e-4f, 1e-6f);

  setenv("SHOAL_CUDA_GRAPHS", "0", 1);
  auto eager = (*ex)->Compile(c.graph, o);
  unsetenv("SHOAL_CUDA_GRAPHS");
  ASSERT_TRUE(eager.ok()) << eager.status().ToString();
  m = (*eager)->execution_mode();
  EXPECT_EQ(m.graph_buckets, 0);
  EXPECT_EQ(m.eager_buckets, 4);
  EXPECT_EQ(m.eager_reason, "CUDA graphs are off (SHOAL_CUDA_GRAPHS=0)");
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_TRUE((*eager)->Run({c.x, out, c.batch}).ok());
  ExpectNear(out, c.want, 1e-4f, 1e-6f);
}

// A capture that fails (SHOAL_CUDA_GRAPH_CAPTURE_FAULT=1 makes CUDA invalidate every capture)
// does not fail Compile or Run: each bucket runs eagerly, execution_mode() gives the reason, the
// answers are right in every bucket, and nothing is captured again on later runs.
TEST(CudaExecutor, FailedCaptureFallsBackToEagerWithTheReason) {
  SKIP_WITHOUT_GPU();
  const ExactGemm c = MakeExactGemm(64, 32, 8);
  ExecutorOptions o;
  o.max_batch = 8;
  auto ex = CreateExecutor("cuda");
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  setenv("SHOAL_CUDA_GRAPH_CAPTURE_FAULT", "1", 1);
  auto exe = (*ex)->Compile(c.graph, o);
  unsetenv("SHOAL_CUDA_GRAPH_CAPTURE_FAULT");
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  const ExecutionMode m = (*exe)->execution_mode();
  EXPECT_EQ(m.graph_buckets, 0);
  EXPECT_EQ(m.eager_buckets, 4);
  EXPECT_EQ(m.eager_reason.rfind("capturing the batch-1 bucket as a CUDA graph failed: ", 0), 0u)
      << m.eager_reason;
  EXPECT_NE(m.eager_reason.find("SHOAL_CUDA_GRAPH_CAPTURE_FAULT"), std::string::npos)
      << m.eager_reason;
  for (int round = 0; round < 2; ++round) {
    for (int64_t batch : {1, 2, 3, 8}) {
      std::vector<float> out(static_cast<size_t>(batch * 32), -1.0f);
      const std::vector<float> x(c.x.begin(), c.x.begin() + batch * 64);
      const std::vector<float> want(c.want.begin(), c.want.begin() + batch * 32);
      const Status st = (*exe)->Run({x, out, batch});
      ASSERT_TRUE(st.ok()) << st.ToString();
      ExpectNear(out, want, 1e-4f, 1e-6f);
    }
    EXPECT_EQ((*exe)->execution_mode().eager_buckets, 4) << "a capture was retried";
  }
}

#if defined(SHOAL_HAVE_CPU_EXECUTOR)
// Not a GPU test: keeps the checked-in references equal to what the CPU executor computes.
TEST(CpuReferenceForCuda, FilesMatchTheCpuExecutor) {
  const char* write = std::getenv("SHOAL_WRITE_CUDA_REFS");
  for (const RefCase& c : RefCases()) {
    const std::vector<float> x = RefInput(c);
    ExecutorOptions o;
    o.max_batch = 64;
    const std::vector<float> y = RunOn("cpu", c.graph, x, c.batch, o);
    if (write != nullptr && std::string(write) == "1") {
      std::ofstream(RefPath(c.name, "input"), std::ios::binary)
          .write(reinterpret_cast<const char*>(x.data()),
                 static_cast<std::streamsize>(x.size() * 4));
      std::ofstream(RefPath(c.name, "output"), std::ios::binary)
          .write(reinterpret_cast<const char*>(y.data()),
                 static_cast<std::streamsize>(y.size() * 4));
      continue;
    }
    std::vector<float> want;
    ASSERT_TRUE(ReadRef(RefPath(c.name, "output"), want)) << RefPath(c.name, "output");
    ExpectNear(y, want, 1e-5f, 1e-5f);
  }
}

TEST(CudaExecutor, MatchesTheCpuExecutorOnResNetAndMlp) {
  SKIP_WITHOUT_GPU();
  ResNetOptions r;
  r.widths = {16, 32, 32, 64};
  r.image = 64;
  r.classes = 10;
  Graph res = ResNetGraph(r);  // the ImageNet stem: 7x7/2 conv, 3x3/2 max-pool
  ASSERT_TRUE(res.Validate().ok());
  ExecutorOptions o;
  o.max_batch = 3;
  const auto x = RandomInput(3 * 3 * 64 * 64, 11);
  const auto cpu = RunOn("cpu", res, x, 3, o);
  ExpectNear(RunCuda(res, x, 3, o), cpu, 1e-3f, 1e-3f);

  Graph mlp = MlpGraph(784, {128}, 10);
  RandomWeights(mlp, 4, 0.05f);
  ASSERT_TRUE(mlp.Validate().ok());
  o.max_batch = 64;
  const auto xm = RandomInput(37 * 784, 12);
  ExpectNear(RunCuda(mlp, xm, 37, o), RunOn("cpu", mlp, xm, 37, o), 1e-4f, 1e-4f);
}
#endif

}  // namespace
}  // namespace shoal::inference
