#include "shoal/fl/wire/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace shoal::model {
namespace {

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(DTypeName(DType::kF32), "F32");
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeName(DType::kF16), "F16");
  EXPECT_EQ(DTypeFromName("BF16"), DType::kBF16);
  EXPECT_EQ(DTypeFromName("I64"), std::nullopt);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
}

TEST(DType, Bf16KnownValuesAndRounding) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // Ties go to even: 0x3f808000 is halfway between 0x3f80 and 0x3f81.
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_FLOAT_EQ(Bf16ToFloat(0x4049), 3.140625f);
}

TEST(DType, F16KnownValuesAndRounding) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: zero
  EXPECT_EQ(FloatToF16(std::ldexp(1.5f, -24)), 0x0002);         // tie to even: 2
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_FLOAT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_FLOAT_EQ(F16ToFloat(0x3555), 0.333251953125f);
}

TEST(DType, EveryHalfValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<uint16_t>(h);
    if ((v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0) continue;  // NaN payloads
    ASSERT_EQ(FloatToF16(F16ToFloat(v)), v) << std::hex << h;
    if ((v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0) continue;
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(v)), v) << std::hex << h;
  }
}

TEST(DType, EncodeDecodeAndNonFiniteScan) {
  const std::vector<float> v = {1.0f, -0.5f, std::numeric_limits<float>::infinity(), 2.0f,
                                std::numeric_limits<float>::quiet_NaN()};
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<std::byte> bytes(v.size() * DTypeSize(d) + 1);
    EncodeFloats(v.data(), v.size(), d, bytes.data() + 1);  // unaligned on purpose
    std::vector<float> back(v.size());
    DecodeFloats(bytes.data() + 1, d, v.size(), back.data());
    EXPECT_EQ(back[0], 1.0f);
    EXPECT_EQ(back[1], -0.5f);
    EXPECT_TRUE(std::isinf(back[2]));
    EXPECT_TRUE(std::isnan(back[4]));
    const NonFinite nf = CountNonFinite(bytes.data() + 1, d, v.size());
    EXPECT_EQ(nf.count, 2u) << DTypeName(d);
    EXPECT_EQ(nf.first, 2u) << DTypeName(d);
  }
}

}  // namespace
}  // namespace shoal::model
