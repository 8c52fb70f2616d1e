#include "bench/stream_bandwidth.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace shoal::bench {
namespace {

// Odd length: every thread's slice and the SIMD bodies' scalar tails are exercised.
constexpr size_t kN = 100'003;

float Expected(StreamKernel k) {  // b = 2, c = 0.5, s = 3
  switch (k) {
    case StreamKernel::kCopy:
      return 2.0f;
    case StreamKernel::kScale:
      return 6.0f;
    case StreamKernel::kAdd:
      return 2.5f;
    case StreamKernel::kTriad:
      return 3.5f;
  }
  return 0;
}

TEST(StreamBench, EveryKernelWritesEveryElement) {
  for (unsigned threads : {1u, 3u}) {
    StreamBench bench(kN, threads);
    ASSERT_TRUE(bench.ok());
    EXPECT_EQ(bench.threads(), threads);
    // Regular and non-temporal stores of the four kernels where SIMD exists; regular ones always.
    ASSERT_GE(bench.variants().size(), 4u);
    for (const auto& v : bench.variants()) {
      bench.Once(v);
      size_t wrong = 0;
      for (size_t i = 0; i < kN; ++i) wrong += bench.output()[i] != Expected(v.kernel);
      EXPECT_EQ(wrong, 0u) << StreamKernelName(v.kernel) << (v.non_temporal ? " nt" : "")
                           << " threads " << threads;
    }
  }
}

TEST(StreamBench, BytesCountStreamArraysPlusWriteAllocateWhereProbed) {
  StreamBench bench(kN, 2);
  StreamResult probe;
  bench.Probe(1, &probe);
  EXPECT_GT(probe.fill_regular_ms, 0);
  EXPECT_EQ(probe.write_allocate, bench.write_allocate());
  const double extra = bench.write_allocate() ? 4 : 0;
  for (const auto& v : bench.variants()) {
    const double stream =
        v.kernel == StreamKernel::kCopy || v.kernel == StreamKernel::kScale ? 8 : 12;
    EXPECT_EQ(bench.BytesPerElement(v), stream + (v.non_temporal ? 0 : extra))
        << StreamKernelName(v.kernel);
    const StreamRow row = bench.Row(v, 0.001);  // 1 ms
    EXPECT_DOUBLE_EQ(row.gbps, row.bytes_per_element * kN / 0.001 / 1e9);
  }
}

TEST(StreamBench, MeasureKeepsTheBestRow) {
  const StreamResult r = MeasureStream(kN, 2, 2);
  ASSERT_FALSE(r.rows.empty());
  double best = 0;
  for (const auto& row : r.rows) best = std::max(best, row.gbps);
  EXPECT_EQ(r.best.gbps, best);
  EXPECT_EQ(r.elements, kN);
}

TEST(StreamElements, FollowsTheRuleWithinBounds) {
  std::string how;
  const size_t n = StreamElements(1'000'000, &how);
  EXPECT_GE(n, 1'000'000u);
  EXPECT_EQ(n % 16, 0u);
  EXPECT_NE(how.find("MB per array"), std::string::npos) << how;
  // A floor above every cap wins.
  const size_t huge = size_t{1} << 40;
  EXPECT_EQ(StreamElements(huge, &how), huge);
}

TEST(ThreadTeam, RunsEachThreadOncePerCall) {
  ThreadTeam team(4);
  ASSERT_EQ(team.size(), 4u);
  std::vector<std::atomic<int>> calls(4);
  for (int r = 0; r < 200; ++r) {
    team.Run([&](unsigned t, unsigned total) {
      EXPECT_EQ(total, 4u);
      calls[t].fetch_add(1);
    });
  }
  for (auto& c : calls) EXPECT_EQ(c.load(), 200);
}

}  // namespace
}  // namespace shoal::bench
