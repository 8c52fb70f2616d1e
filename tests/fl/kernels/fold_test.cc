// The fold kernels on every instruction-set path the CPU has, against references written here:
// IEEE round-to-nearest-even computed in double (not the bit tricks the library uses), the fold
// as std::fma on the fused paths and as acc + w * x (two roundings) on the scalar path.
#include "shoal/fl/kernels/fold.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace shoal::aggregator {
namespace {

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// ---- Reference formats: bf16 = 8 exponent / 7 mantissa bits, fp16 = 5 / 10 ----------------------

struct Format {
  int ebits, mbits;
};
constexpr Format kBf16Format{8, 7};
constexpr Format kF16Format{5, 10};

double RefDecode(uint16_t h, Format f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const bool neg = h >> 15;
  const int e = (h >> f.mbits) & ((1 << f.ebits) - 1);
  const int m = h & ((1 << f.mbits) - 1);
  double v;
  if (e == (1 << f.ebits) - 1) {
    v = m ? std::nan("") : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(m, 1 - bias - f.mbits);
  } else {
    v = std::ldexp(m + (1 << f.mbits), e - bias - f.mbits);
  }
  return neg ? -v : v;
}

// Round a finite or infinite float to the format, ties to even. NaNs are not handled here.
uint16_t RefRound(float x, Format f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t inf = sign | static_cast<uint16_t>(((1 << f.ebits) - 1) << f.mbits);
  if (std::isinf(x)) return inf;
  const double v = std::fabs(static_cast<double>(x));
  if (v == 0) return sign;
  int exp2;
  std::frexp(v, &exp2);
  int e = std::max(exp2 - 1, 1 - bias);  // below the normal range: subnormal quantum
  double r = std::nearbyint(std::ldexp(v, f.mbits - e));  // exact scaling; default mode is RNE
  if (r == std::ldexp(1.0, f.mbits + 1)) {                // rounded up to the next binade
    ++e;
    r /= 2;
  }
  if (e > bias) return inf;
  const int top = 1 << f.mbits;
  if (r < top) return sign | static_cast<uint16_t>(r);  // subnormal (e is the minimum)
  return sign | static_cast<uint16_t>(((e + bias) << f.mbits) | (static_cast<int>(r) - top));
}

Format FormatOf(DType d) { return d == DType::kBF16 ? kBf16Format : kF16Format; }

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- Parameterised over the ISA paths
// ------------------------------------------------------------

class FoldIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!IsaSupported(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << IsaName(GetParam())
                   << (GetParam() == Isa::kAvx2 ? " (AVX2+FMA+F16C)" : " (AVX-512F)");
    }
  }
  Isa isa() const { return GetParam(); }
};

std::string IsaParamName(const ::testing::TestParamInfo<Isa>& info) { return IsaName(info.param); }

INSTANTIATE_TEST_SUITE_P(AllPaths, FoldIsaTest, ::testing::ValuesIn(kAllIsas), IsaParamName);

TEST_P(FoldIsaTest, WidensEveryBf16AndF16BitPatternExactly) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> in(65536);
    for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
    std::vector<float> out(65536);
    ConvertToF32WithIsa(isa(), out.data(), in.data(), d, in.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      const double ref = RefDecode(static_cast<uint16_t>(i), FormatOf(d));
      if (std::isnan(ref)) {
        ASSERT_TRUE(std::isnan(out[i])) << DTypeName(d) << " bits 0x" << std::hex << i;
        ASSERT_EQ(std::signbit(out[i]), (i & 0x8000) != 0);
      } else {
        ASSERT_EQ(Bits(out[i]), Bits(static_cast<float>(ref)))
            << DTypeName(d) << " bits 0x" << std::hex << i;
      }
    }
  }
}

TEST_P(FoldIsaTest, RoundTripsEveryBf16AndF16BitPattern) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> in(65536), back(65536);
    for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
    std::vector<float> wide(65536);
    ConvertToF32WithIsa(isa(), wide.data(), in.data(), d, in.size());
    ConvertFromF32WithIsa(isa(), back.data(), wide.data(), d, in.size());
    const uint16_t exp_mask = d == DType::kBF16 ? 0x7f80 : 0x7c00;
    const uint16_t quiet = d == DType::kBF16 ? 0x0040 : 0x0200;
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool nan = (i & exp_mask) == exp_mask && (i & ~(exp_mask | 0x8000u)) != 0;
      if (nan) {  // stays a NaN of the same sign, quieted, payload kept
        ASSERT_EQ(back[i], i | quiet) << DTypeName(d) << " bits 0x" << std::hex << i;
      } else {
        ASSERT_EQ(back[i], i) << DTypeName(d) << " bits 0x" << std::hex << i;
      }
    }
  }
}

// f32 inputs chosen to hit every rounding case: all 65536 top halves with low halves that make
// exact ties, just-below and just-above ties for both bf16 (bit 15) and fp16 (bit 12), plus random.
std::vector<float> NarrowingInputs() {
  static const uint16_t kLow[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000, 0x2fff, 0x3000,
                                  0x3001, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xf000, 0xffff};
  std::vector<float> v;
  std::mt19937 rng(42);
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint16_t lo : kLow) v.push_back(std::bit_cast<float>(hi << 16 | lo));
    v.push_back(std::bit_cast<float>(hi << 16 | static_cast<uint32_t>(rng() & 0xffff)));
  }
  for (int i = 0; i < 1 << 20; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return v;
}

TEST_P(FoldIsaTest, NarrowsToBf16AndF16WithRoundToNearestEven) {
  const std::vector<float> in = NarrowingInputs();
  std::vector<uint16_t> out(in.size()), scalar(in.size());
  for (DType d : {DType::kBF16, DType::kF16}) {
    ConvertFromF32WithIsa(isa(), out.data(), in.data(), d, in.size());
    ConvertFromF32WithIsa(Isa::kScalar, scalar.data(), in.data(), d, in.size());
    const uint16_t exp_mask = d == DType::kBF16 ? 0x7f80 : 0x7c00;
    size_t checked_subnormal = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      // Every path gives the same bits, NaN payloads included.
      ASSERT_EQ(out[i], scalar[i]) << DTypeName(d) << " input 0x" << std::hex << Bits(in[i]);
      if (std::isnan(in[i])) {
        ASSERT_EQ(out[i] & exp_mask, exp_mask);
        ASSERT_NE(out[i] & ~(exp_mask | 0x8000u), 0u)
            << "NaN became Inf: 0x" << std::hex << Bits(in[i]);
        ASSERT_EQ(out[i] >> 15, Bits(in[i]) >> 31);
        continue;
      }
      ASSERT_EQ(out[i], RefRound(in[i], FormatOf(d)))
          << DTypeName(d) << " input 0x" << std::hex << Bits(in[i]) << " = " << in[i];
      if ((out[i] & exp_mask) == 0 && (out[i] & 0x7fff) != 0) ++checked_subnormal;
    }
    EXPECT_GT(checked_subnormal, 1000u) << "inputs must exercise subnormal results";
  }
}

TEST_P(FoldIsaTest, NarrowingKnownValues) {
  const float in[] = {65504.0f,   65519.99f,  65520.0f,   1e9f,  0x1p-24f,
                      0x1p-25f,   0x1.8p-25f, 0x1.8p-24f, -0.0f, 1.00390625f /* bf16 tie, lsb 0 */,
                      1.01171875f /* bf16 tie, lsb 1 */};
  const uint16_t f16[] = {0x7bff, 0x7bff, 0x7c00, 0x7c00, 0x0001, 0x0000,
                          0x0001, 0x0002, 0x8000, 0x3c04, 0x3c0c};
  const uint16_t bf16[] = {0x4780, 0x4780, 0x4780, 0x4e6e, 0x3380, 0x3300,
                           0x3340, 0x33c0, 0x8000, 0x3f80, 0x3f82};
  constexpr size_t n = std::size(in);
  uint16_t out[n];
  ConvertFromF32WithIsa(isa(), out, in, DType::kF16, n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], f16[i]) << "f16 of " << in[i];
  ConvertFromF32WithIsa(isa(), out, in, DType::kBF16, n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], bf16[i]) << "bf16 of " << in[i];
}

// Fills n wire elements of dtype with finite values (random bits for bf16/fp16, subnormals in).
std::vector<uint8_t> RandomWire(DType d, size_t n, std::mt19937& rng) {
  std::vector<uint8_t> bytes(n * DTypeSize(d));
  for (size_t i = 0; i < n; ++i) {
    if (d == DType::kF32) {
      const float f = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
      std::memcpy(&bytes[4 * i], &f, 4);
    } else {
      const uint16_t exp_mask = d == DType::kBF16 ? 0x7f80 : 0x7c00;
      uint16_t h;
      do {
        h = static_cast<uint16_t>(rng());
      } while ((h & exp_mask) == exp_mask);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  return bytes;
}

float WireAt(const uint8_t* p, DType d, size_t i) {
  float f;
  ConvertToF32WithIsa(Isa::kScalar, &f, p + i * DTypeSize(d), d, 1);
  return f;
}

double Ulp(float v) {
  const float a = std::fabs(v);
  return static_cast<double>(std::nextafter(a, INFINITY)) - a;
}

float Unfused(float acc, float w, float x) {
  volatile float product = w * x;  // forces the product's rounding
  return acc + product;
}

TEST_P(FoldIsaTest, FoldMatchesReferenceForEveryTailAndAlignment) {
  std::mt19937 rng(7);
  const float w = 0.3718f;
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 67; ++n) sizes.push_back(n);
  sizes.push_back(1000 + 13);
  for (DType d : kAllDTypes) {
    for (size_t n : sizes) {
      for (size_t acc_off = 0; acc_off < 3; ++acc_off) {
        for (size_t x_off = 0; x_off < 3; ++x_off) {  // byte offsets: odd means misaligned
          const std::vector<uint8_t> wire = RandomWire(d, n, rng);
          std::vector<uint8_t> xbuf(wire.size() + 8);
          if (n > 0) std::memcpy(xbuf.data() + x_off, wire.data(), wire.size());
          std::vector<float> acc(n + 8, 12345.0f);  // guard values around the range
          for (size_t i = 0; i < n; ++i) {
            acc[acc_off + i] = std::uniform_real_distribution<float>(-5.0f, 5.0f)(rng);
          }
          const std::vector<float> before = acc;
          FoldWithIsa(isa(), acc.data() + acc_off, xbuf.data() + x_off, d, n, w);
          for (size_t i = 0; i < acc.size(); ++i) {
            if (i < acc_off || i >= acc_off + n) {
              ASSERT_EQ(acc[i], 12345.0f) << "wrote outside [0, n) at " << i;
              continue;
            }
            const float a = before[i], x = WireAt(wire.data(), d, i - acc_off);
            const float fused = std::fma(w, x, a), unfused = Unfused(a, w, x);
            const float want = isa() == Isa::kScalar ? unfused : fused;
            ASSERT_EQ(Bits(acc[i]), Bits(want)) << DTypeName(d) << " n=" << n << " i=" << i;
            // The two formulas differ by the product's rounding plus the sum's: at most half an
            // ulp of w * x plus one ulp of the result (many ulps of the result under cancellation).
            const double bound = 0.5 * Ulp(w * x) + Ulp(fused);
            ASSERT_LE(std::fabs(static_cast<double>(fused) - unfused), bound);
          }
        }
      }
    }
  }
}

TEST_P(FoldIsaTest, ScaleIsExactProduct) {
  std::mt19937 rng(3);
  for (size_t n = 0; n <= 67; ++n) {
    std::vector<float> acc(n + 1);
    for (auto& a : acc) a = std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng);
    const std::vector<float> before = acc;
    ScaleWithIsa(isa(), acc.data() + 1, n, 1.0f / 3.0f);
    EXPECT_EQ(acc[0], before[0]);
    for (size_t i = 1; i <= n; ++i) ASSERT_EQ(Bits(acc[i]), Bits(before[i] * (1.0f / 3.0f)));
  }
}

TEST_P(FoldIsaTest, AllFiniteFindsNanOrInfAtEveryPosition) {
  std::mt19937 rng(11);
  for (DType d : kAllDTypes) {
    const size_t sz = DTypeSize(d);
    // Largest finite, smallest subnormal: finite, must pass.
    const uint32_t max_finite = d == DType::kF32    ? 0x7f7fffffu
                                : d == DType::kBF16 ? 0x7f7f
                                                    : 0x7bff;
    const uint32_t bad_values[] = {
        d == DType::kF32    ? 0x7fc00000u
        : d == DType::kBF16 ? 0x7fc0u
                            : 0x7e00u,  // quiet NaN
        d == DType::kF32    ? 0x7f800001u
        : d == DType::kBF16 ? 0x7f81u
                            : 0x7c01u,  // signalling NaN
        d == DType::kF32    ? 0x7f800000u
        : d == DType::kBF16 ? 0x7f80u
                            : 0x7c00u,  // +Inf
        d == DType::kF32    ? 0xff800000u
        : d == DType::kBF16 ? 0xff80u
                            : 0xfc00u,  // -Inf
    };
    for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{63},
                     size_t{64}, size_t{65}, size_t{67}, size_t{129}, size_t{300}, size_t{1031}}) {
      for (size_t off = 0; off < 2; ++off) {
        std::vector<uint8_t> buf(n * sz + 2);
        std::vector<uint8_t> wire = RandomWire(d, n, rng);
        if (n > 0) std::memcpy(wire.data(), &max_finite, sz);
        if (n > 1) wire[sz] = 1;  // a subnormal (little-endian low byte)
        if (n > 1) std::memset(&wire[sz + 1], 0, sz - 1);
        if (n > 0) std::memcpy(buf.data() + off, wire.data(), wire.size());
        ASSERT_TRUE(AllFiniteWithIsa(isa(), buf.data() + off, d, n)) << DTypeName(d) << " n=" << n;
        for (size_t p = 0; p < n; ++p) {
          for (uint32_t bad : bad_values) {
            uint8_t saved[4];
            std::memcpy(saved, buf.data() + off + p * sz, sz);
            std::memcpy(buf.data() + off + p * sz, &bad, sz);
            ASSERT_FALSE(AllFiniteWithIsa(isa(), buf.data() + off, d, n))
                << DTypeName(d) << " n=" << n << " bad 0x" << std::hex << bad << " at " << p;
            std::memcpy(buf.data() + off + p * sz, saved, sz);
          }
        }
      }
    }
  }
}

// The fused pass: for finite input, Fold's bits whatever the block size (blocks start anywhere,
// so a block's tail is the scalar fma where Fold had the vector body); a non-finite value at the
// first element, at either side of a block boundary and at the last element: the pass returns
// the start of its block, acc holds Fold's bits before it and is untouched from there on.
TEST_P(FoldIsaTest, FoldFiniteIsFoldBlockByBlockAndStopsAtTheBadBlock) {
  std::mt19937 rng(13);
  const float w = -0.8125f;
  for (DType d : kAllDTypes) {
    const size_t sz = DTypeSize(d);
    const uint32_t nan = d == DType::kF32 ? 0x7fc00000u : d == DType::kBF16 ? 0x7fc0u : 0x7e00u;
    for (size_t n : {size_t{0}, size_t{1}, size_t{67}, size_t{1013}, size_t{4101}}) {
      for (size_t block :
           {size_t{1}, size_t{16}, size_t{100}, size_t{128}, size_t{1024}, size_t{8192}}) {
        std::vector<uint8_t> xbuf(n * sz + 1);  // odd byte offset: misaligned
        const std::vector<uint8_t> wire = RandomWire(d, n, rng);
        if (n > 0) std::memcpy(xbuf.data() + 1, wire.data(), wire.size());
        std::vector<float> start(n + 1);
        for (auto& a : start) a = std::uniform_real_distribution<float>(-5.0f, 5.0f)(rng);
        std::vector<float> want = start, got = start;
        FoldWithIsa(isa(), want.data(), xbuf.data() + 1, d, n, w);
        ASSERT_EQ(FoldFiniteWithIsa(isa(), got.data(), xbuf.data() + 1, d, n, w, block), n);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), (n + 1) * 4))
            << DTypeName(d) << " n=" << n << " block=" << block;
        if (n == 0) continue;
        for (size_t p : {size_t{0}, block - 1, block, n - 1}) {
          if (p >= n) continue;
          std::vector<uint8_t> bad = xbuf;
          std::memcpy(bad.data() + 1 + p * sz, &nan, sz);
          got = start;
          const size_t folded =
              FoldFiniteWithIsa(isa(), got.data(), bad.data() + 1, d, n, w, block);
          ASSERT_EQ(folded, p / block * block) << DTypeName(d) << " n=" << n << " p=" << p;
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), folded * 4)) << "folded part";
          ASSERT_EQ(0,
                    std::memcmp(start.data() + folded, got.data() + folded, (n + 1 - folded) * 4))
              << DTypeName(d) << " n=" << n << " p=" << p << ": touched from the bad block on";
        }
      }
    }
  }
}

TEST_P(FoldIsaTest, ConvertF32IsACopyAndConversionsHandleTails) {
  std::mt19937 rng(5);
  for (size_t n = 0; n <= 67; ++n) {
    for (DType d : kAllDTypes) {
      const std::vector<uint8_t> wire = RandomWire(d, n, rng);
      std::vector<uint8_t> xbuf(wire.size() + 1);
      if (n > 0) std::memcpy(xbuf.data() + 1, wire.data(), wire.size());
      std::vector<float> wide(n + 1, -7.0f);
      ConvertToF32WithIsa(isa(), wide.data(), xbuf.data() + 1, d, n);
      ASSERT_EQ(wide[n], -7.0f);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(wide[i]), Bits(WireAt(wire.data(), d, i)));
      std::vector<uint8_t> back(wire.size() + 2, 0xee);
      ConvertFromF32WithIsa(isa(), back.data() + 1, wide.data(), d, n);
      if (n > 0) {
        ASSERT_EQ(0, std::memcmp(back.data() + 1, wire.data(), wire.size())) << DTypeName(d);
      }
      ASSERT_EQ(back[0], 0xee);
      ASSERT_EQ(back.back(), 0xee);
    }
  }
}

// ---- Dispatch -----------------------------------------------------------------------------------

TEST(FoldDispatchTest, ChoosesTheBestSupportedPath) {
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  EXPECT_TRUE(IsaSupported(ActiveIsa()));
  EXPECT_STREQ(FoldIsa(), IsaName(ActiveIsa()));
  if (std::getenv("SHOAL_FOLD_ISA") == nullptr) {
    const Isa best = IsaSupported(Isa::kAvx512) ? Isa::kAvx512
                     : IsaSupported(Isa::kAvx2) ? Isa::kAvx2
                                                : Isa::kScalar;
    EXPECT_EQ(ActiveIsa(), best);
  }
}

TEST(FoldDispatchTest, DefaultEntryPointsUseTheActivePath) {
  std::mt19937 rng(9);
  for (DType d : kAllDTypes) {
    const size_t n = 1000 + 7;
    const std::vector<uint8_t> wire = RandomWire(d, n, rng);
    std::vector<float> a(n, 1.0f), b(n, 1.0f);
    Fold(a.data(), wire.data(), d, n, 0.5f);
    FoldWithIsa(ActiveIsa(), b.data(), wire.data(), d, n, 0.5f);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * 4)) << DTypeName(d);
    EXPECT_TRUE(AllFinite(wire.data(), d, n));
    std::vector<float> c(n, 1.0f);
    EXPECT_EQ(FoldFinite(c.data(), wire.data(), d, n, 0.5f, 64), n);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), n * 4)) << DTypeName(d);
  }
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
}

}  // namespace
}  // namespace shoal::aggregator
