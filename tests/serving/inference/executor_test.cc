// The executor interface on the CPU: batch limits, span checks, batch-size buckets, the factory.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "shoal/serving/graph/architectures_graph.h"
#include "test_graphs.h"

namespace shoal::inference {
namespace {

std::unique_ptr<Executable> CompileMlp(int64_t max_batch) {
  Graph g = MlpGraph(6, {5}, 3);
  // Distinct weights so that every output depends on every input.
  float v = 0.01f;
  for (auto& [name, init] : g.initializers) {
    for (float& x : init.floats) x = (v += 0.013f) - 0.3f;
  }
  EXPECT_TRUE(g.Validate().ok());
  auto ex = CreateExecutor("cpu");
  EXPECT_TRUE(ex.ok());
  auto exe = (*ex)->Compile(g, {.max_batch = max_batch});
  EXPECT_TRUE(exe.ok()) << exe.status().ToString();
  return std::move(*exe);
}

TEST(CpuExecutor, ShapesWithoutBatch) {
  auto exe = CompileMlp(4);
  EXPECT_EQ(exe->input_shape(), (std::vector<int64_t>{6}));
  EXPECT_EQ(exe->output_shape(), (std::vector<int64_t>{3}));
}

TEST(CpuExecutor, BatchAboveMaxOrZeroRefused) {
  auto exe = CompileMlp(4);
  std::vector<float> in(5 * 6), out(5 * 3);
  Status s = exe->Run({in, out, 5});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "batch 5 is outside 1..4 (max_batch)");
  EXPECT_EQ(exe->Run({{}, {}, 0}).code(), StatusCode::kInvalidArgument);
}

TEST(CpuExecutor, WrongSpanSizesRefused) {
  auto exe = CompileMlp(4);
  std::vector<float> in(2 * 6 + 1), out(2 * 3);
  Status s = exe->Run({in, out, 2});
  EXPECT_EQ(s.message(), "input has 13 floats; batch 2 of [6] needs 12");
  in.resize(12);
  out.resize(5);
  s = exe->Run({in, out, 2});
  EXPECT_EQ(s.message(), "output has room for 5 floats; batch 2 of [3] needs 6");
}

TEST(CpuExecutor, EveryBatchSizeGivesThePerSampleAnswer) {
  auto exe = CompileMlp(7);  // buckets 1, 2, 4, 7: batch 3 pads to 4, 5 and 6 to 7
  std::vector<float> in(7 * 6);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 11) * 0.1f - 0.4f;
  std::vector<float> single(7 * 3);
  for (int64_t b = 0; b < 7; ++b) {
    ASSERT_TRUE(exe->Run({std::span<const float>(in).subspan(static_cast<size_t>(b) * 6, 6),
                          std::span<float>(single).subspan(static_cast<size_t>(b) * 3, 3), 1})
                    .ok());
  }
  for (int64_t batch = 1; batch <= 7; ++batch) {
    std::vector<float> out(static_cast<size_t>(batch) * 3);
    ASSERT_TRUE(
        exe->Run({std::span<const float>(in).first(static_cast<size_t>(batch) * 6), out, batch})
            .ok());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], single[i], 1e-6f) << batch;
  }
}

// Hot swap: a new version compiles on one thread while the running one serves on another, and
// the running one's answers do not change.
TEST(CpuExecutor, CompileBesideARunningExecutable) {
  auto running = CompileMlp(4);
  std::vector<float> in(4 * 6, 0.5f), first(4 * 3), again(4 * 3);
  ASSERT_TRUE(running->Run({in, first, 4}).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> runs{0}, mismatches{0};
  std::thread server([&] {
    while (!stop) {
      if (!running->Run({in, again, 4}).ok() || again != first) ++mismatches;
      ++runs;
    }
  });
  auto ex = CreateExecutor("cpu");
  for (int v = 1; v <= 5; ++v) {
    Graph g = MlpGraph(6, {5}, 3);
    ASSERT_TRUE(g.SetWeights({{"fc2.bias", {float(v), 0, 0}}}).ok());
    ASSERT_TRUE(g.Validate().ok());
    auto next = (*ex)->Compile(g, {.max_batch = 4});
    ASSERT_TRUE(next.ok());
    std::vector<float> out(3);
    ASSERT_TRUE((*next)->Run({std::span<const float>(in).first(6), out, 1}).ok());
    EXPECT_FLOAT_EQ(out[0], float(v));  // zero weights: the output is the bias
  }
  while (runs < 20) std::this_thread::yield();
  stop = true;
  server.join();
  EXPECT_EQ(mismatches, 0);
}

TEST(CpuExecutor, GraphsWithTwoOutputsRefused) {
  Graph g = MlpGraph(2, {2}, 2);
  g.outputs.push_back({"fc1.relu.out", DType::kF32, {}});
  ASSERT_TRUE(g.Validate().ok());
  auto ex = CreateExecutor("cpu");
  auto exe = (*ex)->Compile(g, {});
  EXPECT_EQ(exe.status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuExecutor, Fp16SaysWhyWhenUnavailable) {
  Graph g = MlpGraph(4, {4}, 2);
  ASSERT_TRUE(g.Validate().ok());
  auto ex = CreateExecutor("cpu");
  auto exe = (*ex)->Compile(g, {.precision = Precision::kF16});
  if (exe.ok()) GTEST_SKIP() << "this CPU runs fp16";
  EXPECT_EQ(exe.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(exe.status().message().find("fp16"), std::string::npos) << exe.status().message();
  EXPECT_NE(exe.status().message().find("node 'fc1'"), std::string::npos);
}

TEST(ExecutorFactory, KindsAndCuda) {
  auto cpu = CreateExecutor("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto bad = CreateExecutor("tpu");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  std::string reason;
  const bool cuda = CudaAvailable(&reason);
  auto c = CreateExecutor("cuda");
  EXPECT_EQ(c.ok(), cuda);
  auto a = CreateExecutor("auto");
  ASSERT_TRUE(a.ok());
  if (!cuda) {
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ((*a)->name(), "cpu");
  } else {
    EXPECT_EQ((*a)->name(), "cuda");
  }
}

}  // namespace
}  // namespace shoal::inference
