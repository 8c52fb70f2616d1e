// The model zoo through the CPU executor: each exported graph (export_zoo.py: torchvision and
// transformers models, seeded random weights) loads, compiles and gives onnxruntime's outputs
// on the same fixed input within 1e-4 of the output's scale, at batch 2 and row by row at
// batch 1 (another plan, other folded shape constants).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "shoal/serving/executor/executor.h"
#include "shoal/serving/graph/fold_constants.h"
#include "shoal/serving/onnx/onnx.h"

namespace shoal::inference {
namespace {

constexpr float kRelTolerance = 1e-4f;
constexpr int64_t kBatch = 2;  // export_zoo.py's BATCH

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(v.size() * sizeof(float)),
            reinterpret_cast<char*>(v.data()));
  return v;
}

// max |got - want| / max |want|.
float RelError(const std::vector<float>& got, const std::vector<float>& want) {
  float diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / std::max(scale, 1e-30f);
}

class Zoo : public ::testing::TestWithParam<const char*> {};

TEST_P(Zoo, MatchesOnnxruntime) {
  const std::string base = std::string(SHOAL_ZOO_DIR) + "/" + GetParam();
  auto g = LoadOnnx(base + ".onnx");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  // The shape subgraphs fold away at load: nothing computes shapes at run time.
  auto folded = FoldConstants(*g, kBatch);
  ASSERT_TRUE(folded.ok()) << folded.status().ToString();
  for (const Node& n : folded->nodes) {
    EXPECT_TRUE(n.op != OpType::kShape && n.op != OpType::kConstantOfShape &&
                n.op != OpType::kRange && n.op != OpType::kEqual)
        << n.name << " (" << OpTypeName(n.op) << ") was not folded";
  }
  const auto x = ReadFloats(base + ".input.bin");
  const auto want = ReadFloats(base + ".ref.bin");
  ASSERT_FALSE(want.empty());
  auto cpu = CreateExecutor("cpu");
  ASSERT_TRUE(cpu.ok());
  auto exe = (*cpu)->Compile(*g, {.max_batch = kBatch});
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  std::vector<float> got(want.size());
  ASSERT_TRUE((*exe)->Run({x, got, kBatch}).ok());
  const float err = RelError(got, want);
  EXPECT_LT(err, kRelTolerance);
  RecordProperty("rel_error", std::to_string(err));
  std::printf("%s: max |shoal - onnxruntime| / max |onnxruntime| = %.3g\n", GetParam(), err);
  const size_t in_per = x.size() / kBatch, out_per = want.size() / kBatch;
  for (size_t b = 0; b < kBatch; ++b) {
    std::vector<float> row(out_per);
    const std::span<const float> xb(x.data() + b * in_per, in_per);
    ASSERT_TRUE((*exe)->Run({xb, row, 1}).ok());
    const std::vector<float> wb(want.begin() + static_cast<ptrdiff_t>(b * out_per),
                                want.begin() + static_cast<ptrdiff_t>((b + 1) * out_per));
    EXPECT_LT(RelError(row, wb), kRelTolerance) << "sample " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Zoo,
                         ::testing::Values("resnet50", "mobilenet_v3_small", "efficientnet_b0",
                                           "vit_b16", "bert_base", "gpt2_small"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace shoal::inference
