// FoldPool against the single-thread kernels: same bits on 10M elements with 1, 2 and 3 threads,
// for every operation and dtype, and the small-n and serialised-caller paths.
#include "shoal/fl/kernels/fold_pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/worker_team.h"

namespace shoal::aggregator {
namespace {

constexpr size_t kN = 10'000'000;

// Finite wire values; cheap to generate (an LCG, not mt19937: 10M elements per dtype).
std::vector<uint8_t> Wire(DType d, size_t n, uint32_t seed) {
  std::vector<float> f(n);
  uint32_t s = seed;
  for (auto& v : f) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s)) * 0x1p-31f * 3.0f;
  }
  std::vector<uint8_t> bytes(n * DTypeSize(d));
  ConvertFromF32(bytes.data(), f.data(), d, n);
  return bytes;
}

class FoldPoolTest : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(Threads, FoldPoolTest, ::testing::Values(1u, 2u, 3u),
                         [](const auto& info) { return std::to_string(info.param) + "threads"; });

TEST_P(FoldPoolTest, FoldMatchesSingleThreadBitForBit) {
  FoldPool pool(GetParam());
  ASSERT_EQ(pool.threads(), GetParam());
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::vector<uint8_t> x1 = Wire(d, kN, 1), x2 = Wire(d, kN, 2);
    std::vector<float> want(kN, 0.25f), got(kN, 0.25f);
    // Offsets of 1 element on both sides: chunk boundaries do not line up with the buffers.
    Fold(want.data() + 1, x1.data() + DTypeSize(d), d, kN - 1, 0.7f);
    Fold(want.data() + 1, x2.data() + DTypeSize(d), d, kN - 1, -1.3f);
    Scale(want.data() + 1, kN - 1, 0.5f);
    pool.Fold(got.data() + 1, x1.data() + DTypeSize(d), d, kN - 1, 0.7f);
    pool.Fold(got.data() + 1, x2.data() + DTypeSize(d), d, kN - 1, -1.3f);
    pool.Scale(got.data() + 1, kN - 1, 0.5f);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), kN * sizeof(float))) << DTypeName(d);
  }
}

TEST_P(FoldPoolTest, ConversionsMatchSingleThread) {
  FoldPool pool(GetParam());
  for (DType d : {DType::kBF16, DType::kF16}) {
    const std::vector<uint8_t> x = Wire(d, kN, 3);
    std::vector<float> want(kN), got(kN);
    ConvertToF32(want.data(), x.data(), d, kN);
    pool.ConvertToF32(got.data(), x.data(), d, kN);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), kN * sizeof(float)));
    for (auto& v : got) v *= 1.001f;  // so narrowing has to round
    std::vector<uint8_t> nw(kN * 2), ng(kN * 2);
    ConvertFromF32(nw.data(), got.data(), d, kN);
    pool.ConvertFromF32(ng.data(), got.data(), d, kN);
    ASSERT_EQ(nw, ng) << DTypeName(d);
  }
}

TEST_P(FoldPoolTest, AllFiniteFindsOneBadValueAnywhere) {
  FoldPool pool(GetParam());
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> x = Wire(d, kN, 4);
    ASSERT_TRUE(pool.AllFinite(x.data(), d, kN));
    const size_t sz = DTypeSize(d);
    const uint32_t nan = d == DType::kF32 ? 0x7fc00000u : d == DType::kBF16 ? 0x7fc0u : 0x7e00u;
    for (size_t pos : {size_t{0}, size_t{12345}, kN / 2 + 3, kN - 1}) {
      uint8_t saved[4];
      std::memcpy(saved, &x[pos * sz], sz);
      std::memcpy(&x[pos * sz], &nan, sz);
      EXPECT_FALSE(pool.AllFinite(x.data(), d, kN)) << DTypeName(d) << " NaN at " << pos;
      std::memcpy(&x[pos * sz], saved, sz);
    }
    ASSERT_TRUE(pool.AllFinite(x.data(), d, kN));  // the pool forgets the last call's answer
  }
}

// The fused pass across threads: finite input folds to Fold's bits; a NaN in the first block
// leaves acc untouched and says nothing was folded; a NaN at the first block boundary, in the
// middle or at the last element is reported with `folded`, the first block holds Fold's bits,
// the NaN's own block is untouched, and every element is either untouched or Fold's (no thread
// writes anything else).
TEST_P(FoldPoolTest, FoldFiniteIsFoldAndReportsWhatItFolded) {
  FoldPool pool(GetParam());
  constexpr size_t kM = 1'000'003;  // past min_parallel_elements, 31 chunks
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t sz = DTypeSize(d);
    const size_t block = pool.finite_block_bytes() / sz;
    std::vector<uint8_t> x = Wire(d, kM, 7);
    const std::vector<float> start(kM, 0.75f);
    std::vector<float> want = start, got = start;
    Fold(want.data(), x.data(), d, kM, 0.3f);
    const FoldPool::FoldFiniteResult ok = pool.FoldFinite(got.data(), x.data(), d, kM, 0.3f);
    EXPECT_TRUE(ok.finite);
    EXPECT_TRUE(ok.folded);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), kM * 4)) << DTypeName(d);
    const uint32_t nan = d == DType::kF32 ? 0x7fc00000u : d == DType::kBF16 ? 0x7fc0u : 0x7e00u;
    for (size_t pos : {size_t{0}, block - 1, block, kM / 2 + 3, kM - 1}) {
      uint8_t saved[4];
      std::memcpy(saved, &x[pos * sz], sz);
      std::memcpy(&x[pos * sz], &nan, sz);
      got = start;
      const FoldPool::FoldFiniteResult r = pool.FoldFinite(got.data(), x.data(), d, kM, 0.3f);
      std::memcpy(&x[pos * sz], saved, sz);
      EXPECT_FALSE(r.finite) << DTypeName(d) << " NaN at " << pos;
      EXPECT_EQ(r.folded, pos >= block) << DTypeName(d) << " NaN at " << pos;
      if (pos < block) {
        ASSERT_EQ(0, std::memcmp(start.data(), got.data(), kM * 4)) << "NaN in the first block";
        continue;
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), block * 4)) << "the first block";
      // The NaN's block, from the start of its chunk's block grid (chunks start at `block`).
      const size_t in_chunk = (pos - block) % pool.chunk_elements();
      const size_t bad_begin = pos - in_chunk % block;
      const size_t bad_end = std::min(kM, bad_begin + block);
      for (size_t i = 0; i < kM; ++i) {
        if (i >= bad_begin && i < bad_end) {
          ASSERT_EQ(got[i], start[i]) << DTypeName(d) << " NaN at " << pos << ", i=" << i;
        } else {
          ASSERT_TRUE(got[i] == start[i] || got[i] == want[i])
              << DTypeName(d) << " NaN at " << pos << ", i=" << i;
        }
      }
    }
    got = start;
    ASSERT_TRUE(pool.FoldFinite(got.data(), x.data(), d, kM, 0.3f).finite);  // forgets the NaN
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), kM * 4));
  }
}

// Sum: acc zeroed and each term folded in turn, chunk by chunk: the bits of the whole-array
// sequence (including a -0 term, which a zeroed acc turns into +0, and a 0 weight), for 0-3
// terms, past and below min_parallel_elements, over an acc that held other values.
TEST_P(FoldPoolTest, SumIsZeroThenEachFoldInTurn) {
  FoldPool pool(GetParam());
  for (size_t n : {size_t{1'000'003}, size_t{1000}}) {
    std::vector<std::vector<float>> x(3, std::vector<float>(n));
    for (size_t k = 0; k < 3; ++k) {
      const std::vector<uint8_t> w = Wire(DType::kF32, n, 11 + static_cast<uint32_t>(k));
      std::memcpy(x[k].data(), w.data(), n * 4);
      x[k][k] = -0.0f;
    }
    const float* xs[] = {x[0].data(), x[1].data(), x[2].data()};
    const float ws[] = {0.25f, -1.5f, 0.0f};
    for (size_t terms = 0; terms <= 3; ++terms) {
      std::vector<float> want(n, 0.0f), got(n, 42.0f);
      for (size_t k = 0; k < terms; ++k) Fold(want.data(), xs[k], DType::kF32, n, ws[k]);
      pool.Sum(got.data(), std::span(xs, terms), std::span(ws, terms), n);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), n * 4)) << n << " x " << terms;
    }
    std::vector<float> neg(n, 7.0f);
    const float* minus_zero[] = {x[0].data()};
    const float one[] = {1.0f};
    pool.Sum(neg.data(), minus_zero, one, n);
    EXPECT_FALSE(std::signbit(neg[0])) << "0 + 1 * -0 is +0";
    EXPECT_EQ(neg[1], x[0][1]);
  }
}

TEST(FoldPoolSmallTest, SmallCallsRunInlineAndMatch) {
  FoldPool pool(3);
  EXPECT_EQ(pool.min_parallel_elements(), FoldPool::kDefaultMinParallelElements);
  pool.set_chunk_elements(1000);
  EXPECT_EQ(pool.chunk_elements(), 1008u);  // a multiple of 16
  const std::vector<uint8_t> x = Wire(DType::kF16, 5000, 5);
  for (size_t threshold : {size_t{0}, size_t{1} << 20}) {  // forced parallel, then inline
    pool.set_min_parallel_elements(threshold);
    for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1009}, size_t{5000}}) {
      std::vector<float> want(n, 1.0f), got(n, 1.0f);
      Fold(want.data(), x.data(), DType::kF16, n, 2.0f);
      pool.Fold(got.data(), x.data(), DType::kF16, n, 2.0f);
      ASSERT_EQ(want, got) << "n=" << n << " threshold=" << threshold;
      EXPECT_TRUE(pool.AllFinite(x.data(), DType::kF16, n));
      std::vector<float> fused(n, 1.0f);
      const FoldPool::FoldFiniteResult r =
          pool.FoldFinite(fused.data(), x.data(), DType::kF16, n, 2.0f);
      EXPECT_TRUE(r.finite);
      EXPECT_EQ(r.folded, n > 0);
      ASSERT_EQ(want, fused) << "n=" << n << " threshold=" << threshold;
    }
  }
}

TEST(FoldPoolSmallTest, ConcurrentCallersAreSerialised) {
  FoldPool pool(3);
  pool.set_min_parallel_elements(0);
  pool.set_chunk_elements(256);
  const size_t n = 200'000;
  const std::vector<uint8_t> x = Wire(DType::kF32, n, 6);
  std::vector<float> want(n, 0.0f);
  for (int k = 0; k < 50; ++k) Fold(want.data(), x.data(), DType::kF32, n, 1.0f);
  std::vector<float> a(n, 0.0f), b(n, 0.0f);
  std::thread t1([&] {
    for (int k = 0; k < 50; ++k) pool.Fold(a.data(), x.data(), DType::kF32, n, 1.0f);
  });
  std::thread t2([&] {
    for (int k = 0; k < 50; ++k) pool.Fold(b.data(), x.data(), DType::kF32, n, 1.0f);
  });
  t1.join();
  t2.join();
  EXPECT_EQ(a, want);
  EXPECT_EQ(b, want);
}

TEST(FoldPoolSmallTest, DefaultThreadCountIsHardwareConcurrency) {
  FoldPool pool;
  EXPECT_EQ(pool.threads(), std::max(1u, std::thread::hardware_concurrency()));
}

// The fork-join under FoldPool: each Run calls the work once on every thread index, the caller's
// own thread as 0, and the caller sees every call's writes when Run returns.
TEST(WorkerTeam, EachRunCallsEveryThreadOnceWithTheCallerAsZero) {
  WorkerTeam team(3);
  ASSERT_EQ(team.threads(), 3u);
  std::vector<int> calls(3, 0);  // each index written by its own thread only
  std::thread::id zero;
  for (int run = 0; run < 200; ++run) {
    auto work = [&](unsigned thread) {
      ++calls.at(thread);
      if (thread == 0) zero = std::this_thread::get_id();
    };
    team.Run(work);
  }
  EXPECT_EQ(calls, (std::vector<int>{200, 200, 200}));
  EXPECT_EQ(zero, std::this_thread::get_id());
  WorkerTeam alone(1);
  EXPECT_EQ(alone.threads(), 1u);
  std::thread::id ran_on;
  auto work = [&](unsigned thread) {
    EXPECT_EQ(thread, 0u);
    ran_on = std::this_thread::get_id();
  };
  alone.Run(work);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

}  // namespace
}  // namespace shoal::aggregator
