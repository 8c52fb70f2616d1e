// Scalar conversions between float32 and the narrow float types, written once: the fold's
// scalar kernels and its SIMD tails (shoal/fl/kernels), the update encoder and decoder and
// safetensors (shoal/fl/wire/) all use these. Widening is exact and bit-identical to F16C's
// vcvtph2ps (signalling NaNs come out quiet); narrowing rounds to nearest, ties to even, keeps Inf,
// keeps a NaN a NaN of the same sign (quieted, high payload kept as F16C does), gives fp16
// subnormals correctly and overflows to Inf, bit-identical to F16C's vcvtps2ph.
#pragma once

#include <bit>
#include <cstdint>

namespace shoal {

inline float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) {  // Inf or NaN
    bits = 0x7f800000u | ((em & 0x3ffu) << 13);
    if (em & 0x3ffu) bits |= 0x00400000u;
  } else if (em >= 0x0400u) {  // normal: rebias 15 -> 127
    bits = (em << 13) + (112u << 23);
  } else {  // zero or subnormal: em * 2^-24, exact in float
    bits = std::bit_cast<uint32_t>(static_cast<float>(em) * 0x1p-24f);
  }
  return std::bit_cast<float>(sign | bits);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

inline uint16_t FloatToF16(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t x = b & 0x7fffffffu;
  if (x >= 0x7f800000u) {  // Inf or NaN
    if (x == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf
  if (x >= 0x38800000u) {                       // normal fp16 range
    const uint32_t r = x - (112u << 23);
    return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  // Below 2^-14: an fp16 subnormal (or zero) in units of 2^-24.
  const uint32_t e = x >> 23;
  if (e < 102) return sign;  // < 2^-25: rounds to zero (2^-25 itself is a tie to even 0)
  const uint32_t m = (x & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace shoal
