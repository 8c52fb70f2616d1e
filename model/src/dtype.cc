#include "shoal/model/dtype.h"

#include <bit>
#include <cstring>

namespace shoal::model {

static_assert(std::endian::native == std::endian::little, "wire formats are little-endian");

std::string_view DTypeName(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  return std::nullopt;
}

uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToF16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65536: infinity
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): value = mantissa * 2^-24.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise.
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

void EncodeFloats(const float* src, size_t n, DType dst_dtype, std::byte* dst) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
  }
}

void DecodeFloats(const std::byte* src, DType src_dtype, size_t n, float* dst) {
  uint16_t h;
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = F16ToFloat(h);
      }
      return;
  }
}

NonFinite CountNonFinite(const std::byte* data, DType dtype, size_t n) {
  // A value is non-finite when its exponent bits are all ones.
  NonFinite r;
  auto note = [&r](size_t i) {
    if (r.count++ == 0) r.first = i;
  };
  if (dtype == DType::kF32) {
    uint32_t u;
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&u, data + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) note(i);
    }
    return r;
  }
  const uint16_t mask = dtype == DType::kBF16 ? 0x7f80u : 0x7c00u;
  uint16_t h;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&h, data + 2 * i, 2);
    if ((h & mask) == mask) note(i);
  }
  return r;
}

}  // namespace shoal::model
