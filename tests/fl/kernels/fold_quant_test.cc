// The block-quantized rows of the fold (kQ8, kQ4): the layout against bytes packed by hand here,
// the fused dequantize-and-fold against dequantizing then folding (bit for bit, every path the
// CPU has), the scale checks, quantizing, and FoldPool's split at block boundaries.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"

namespace shoal::aggregator {
namespace {

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
constexpr DType kQuant[] = {DType::kQ8, DType::kQ4};
constexpr size_t kSizes[] = {0, 1, 2, 63, 64, 65, 127, 128, 1000, 4097};

// A quantized tensor packed by hand: n integers q (in range for the type) and one scale per
// block, laid out as shoal/common/dtype.h says, written without the library's helpers.
std::vector<char> Pack(DType d, const std::vector<int>& q, const std::vector<float>& scales) {
  std::vector<char> out;
  for (size_t b = 0; b * 64 < q.size(); ++b) {
    const size_t m = std::min<size_t>(64, q.size() - b * 64);
    char s[4];
    std::memcpy(s, &scales[b], 4);
    out.insert(out.end(), s, s + 4);
    if (d == DType::kQ8) {
      for (size_t j = 0; j < m; ++j) out.push_back(static_cast<char>(q[b * 64 + j]));
    } else {
      for (size_t j = 0; j < m; j += 2) {
        const int lo = q[b * 64 + j] & 15;
        const int hi = j + 1 < m ? q[b * 64 + j + 1] & 15 : 0;
        out.push_back(static_cast<char>(lo | (hi << 4)));
      }
    }
  }
  return out;
}

struct Random {
  std::vector<int> q;
  std::vector<float> scales;
  std::vector<char> bytes;
};

Random MakeRandom(DType d, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int lo = d == DType::kQ8 ? -128 : -8, hi = d == DType::kQ8 ? 127 : 7;
  std::uniform_int_distribution<int> qd(lo, hi);
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  std::uniform_int_distribution<int> ex(-40, 40);
  Random r;
  for (size_t i = 0; i < n; ++i) r.q.push_back(qd(rng));
  for (size_t b = 0; b * 64 < n; ++b) r.scales.push_back(std::ldexp(mant(rng), ex(rng)));
  if (!r.scales.empty()) r.scales[0] = 0.0f;  // a block of zeros is valid
  r.bytes = Pack(d, r.q, r.scales);
  return r;
}

std::vector<float> RandomAcc(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> acc(n);
  for (float& a : acc) a = u(rng);
  return acc;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

TEST(FoldQuantTest, LayoutBytes) {
  EXPECT_EQ(TensorBytes(DType::kQ8, 0), 0u);
  EXPECT_EQ(TensorBytes(DType::kQ8, 1), 5u);
  EXPECT_EQ(TensorBytes(DType::kQ8, 64), 68u);
  EXPECT_EQ(TensorBytes(DType::kQ8, 65), 68u + 5u);
  EXPECT_EQ(TensorBytes(DType::kQ4, 1), 5u);
  EXPECT_EQ(TensorBytes(DType::kQ4, 63), 36u);
  EXPECT_EQ(TensorBytes(DType::kQ4, 64), 36u);
  EXPECT_EQ(TensorBytes(DType::kQ4, 129), 36u * 2 + 5u);
  EXPECT_EQ(ElementOffset(DType::kQ4, 128), 72u);
  EXPECT_EQ(DTypeName(DType::kQ8), "Q8");
  EXPECT_EQ(DTypeName(DType::kQ4), "Q4");
  for (DType d : kQuant) {
    for (size_t n : kSizes) EXPECT_EQ(MakeRandom(d, n, 1).bytes.size(), TensorBytes(d, n)) << n;
  }
}

// Dequantizing gives float(q) * scale, one rounding, on every path, for the bytes packed here.
TEST(FoldQuantTest, DequantizeIsQTimesScale) {
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) continue;
    for (DType d : kQuant) {
      for (size_t n : kSizes) {
        const Random r = MakeRandom(d, n, static_cast<uint32_t>(n) + 7);
        std::vector<float> out(n, -1.0f);
        ConvertToF32WithIsa(isa, out.data(), r.bytes.data(), d, n);
        for (size_t i = 0; i < n; ++i) {
          const float want = static_cast<float>(r.q[i]) * r.scales[i / 64];
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want))
              << IsaName(isa) << " " << DTypeName(d) << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

// The fused fold equals dequantize-then-fold bit for bit, on every path; the fused paths equal
// std::fma(w, float(q) * s, acc) and so each other.
TEST(FoldQuantTest, FusedFoldEqualsDequantizeThenFold) {
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) continue;
    for (DType d : kQuant) {
      for (size_t n : kSizes) {
        const Random r = MakeRandom(d, n, static_cast<uint32_t>(n) * 3 + 1);
        const float w = 0.37f;
        std::vector<float> fused = RandomAcc(n, 5), twostep = fused, ref = fused;
        FoldWithIsa(isa, fused.data(), r.bytes.data(), d, n, w);
        std::vector<float> x(n);
        ConvertToF32WithIsa(isa, x.data(), r.bytes.data(), d, n);
        FoldWithIsa(isa, twostep.data(), x.data(), DType::kF32, n, w);
        EXPECT_TRUE(SameBits(fused, twostep)) << IsaName(isa) << " " << DTypeName(d) << " " << n;
        if (isa != Isa::kScalar) {
          for (size_t i = 0; i < n; ++i) {
            ref[i] = std::fma(w, static_cast<float>(r.q[i]) * r.scales[i / 64], ref[i]);
          }
          EXPECT_TRUE(SameBits(fused, ref)) << IsaName(isa) << " " << DTypeName(d) << " " << n;
        }
        std::vector<float> finite = RandomAcc(n, 5);
        EXPECT_EQ(FoldFiniteWithIsa(isa, finite.data(), r.bytes.data(), d, n, w, 1), n);
        EXPECT_TRUE(SameBits(finite, fused));
      }
    }
  }
}

// A block's scale: finite, >= +0 and <= FLT_MAX / 128; anything else is found by AllFinite and
// stops FoldFinite at that block with nothing after it folded.
TEST(FoldQuantTest, BadScalesAreFound) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -1.0f,
                       -0.0f,
                       std::nextafter(kMaxQuantScale, INFINITY),
                       std::numeric_limits<float>::max()};
  EXPECT_TRUE(ValidQuantScaleBits(std::bit_cast<uint32_t>(kMaxQuantScale)));
  EXPECT_TRUE(std::isfinite(kMaxQuantScale * -128.0f));
  for (Isa isa : kAllIsas) {
    if (!IsaSupported(isa)) continue;
    for (DType d : kQuant) {
      Random r = MakeRandom(d, 200, 9);  // blocks at 0, 64, 128, 192
      r.scales[3] = kMaxQuantScale;      // the largest valid scale
      EXPECT_TRUE(AllFiniteWithIsa(isa, Pack(d, r.q, r.scales).data(), d, 200));
      for (float s : bad) {
        Random b = r;
        b.scales[2] = s;
        b.bytes = Pack(d, b.q, b.scales);
        EXPECT_FALSE(AllFiniteWithIsa(isa, b.bytes.data(), d, 200)) << s;
        const std::vector<float> before = RandomAcc(200, 3);
        std::vector<float> acc = before, want = before;
        EXPECT_EQ(FoldFiniteWithIsa(isa, acc.data(), b.bytes.data(), d, 200, 0.5f, 1), 128u);
        FoldWithIsa(isa, want.data(), b.bytes.data(), d, 128, 0.5f);
        EXPECT_TRUE(SameBits(acc, want)) << IsaName(isa) << " " << s;
      }
    }
  }
}

// Quantizing: symmetric scale max|x| / qmax, every value within half a step of x, zeros exact.
TEST(FoldQuantTest, QuantizeRoundTrips) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const size_t n = 300;
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  for (size_t i = 64; i < 128; ++i) x[i] = 0.0f;
  for (DType d : kQuant) {
    const float qmax = d == DType::kQ8 ? 127.0f : 7.0f;
    std::vector<char> bytes(TensorBytes(d, n));
    ConvertFromF32(bytes.data(), x.data(), d, n);
    std::vector<float> back(n);
    ConvertToF32(back.data(), bytes.data(), d, n);
    for (size_t b = 0; b * 64 < n; ++b) {
      float amax = 0, scale;
      for (size_t i = b * 64; i < std::min(n, b * 64 + 64); ++i)
        amax = std::max(amax, std::fabs(x[i]));
      std::memcpy(&scale, bytes.data() + ElementOffset(d, b * 64), 4);
      EXPECT_EQ(scale, amax / qmax);
      for (size_t i = b * 64; i < std::min(n, b * 64 + 64); ++i) {
        EXPECT_LE(std::fabs(back[i] - x[i]), scale * 0.5f * 1.0001f) << DTypeName(d) << i;
      }
    }
    for (size_t i = 64; i < 128; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), 0u);
    EXPECT_TRUE(AllFinite(bytes.data(), d, n));
  }
}

// FoldPool splits a quantized tensor at block boundaries (its chunk rounded up to whole
// blocks): bit-identical to one thread, and a bad scale far in is found.
TEST(FoldQuantTest, FoldPoolSplitsAtBlocks) {
  FoldPool pool(3);
  pool.set_min_parallel_elements(1000);
  pool.set_chunk_elements(1000);  // 1008 floats; 1024 for a quantized type
  for (DType d : kQuant) {
    const size_t n = 20000 + 17;
    Random r = MakeRandom(d, n, 21);
    std::vector<float> one = RandomAcc(n, 8), many = one, finite = one;
    Fold(one.data(), r.bytes.data(), d, n, 0.25f);
    pool.Fold(many.data(), r.bytes.data(), d, n, 0.25f);
    EXPECT_TRUE(SameBits(one, many)) << DTypeName(d);
    EXPECT_TRUE(pool.FoldFinite(finite.data(), r.bytes.data(), d, n, 0.25f).finite);
    EXPECT_TRUE(SameBits(one, finite));
    std::vector<float> out(n);
    pool.ConvertToF32(out.data(), r.bytes.data(), d, n);
    for (size_t i = 0; i < n; i += 997) EXPECT_EQ(out[i], r.q[i] * r.scales[i / 64]);
    r.scales[250] = std::numeric_limits<float>::infinity();
    r.bytes = Pack(d, r.q, r.scales);
    EXPECT_FALSE(pool.AllFinite(r.bytes.data(), d, n));
    std::vector<float> acc = RandomAcc(n, 8);
    const FoldPool::FoldFiniteResult res = pool.FoldFinite(acc.data(), r.bytes.data(), d, n, 1);
    EXPECT_FALSE(res.finite);
  }
}

}  // namespace
}  // namespace shoal::aggregator
