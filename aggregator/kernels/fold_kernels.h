// Internal to shoal_fold: the per-ISA kernel tables that fold.cc dispatches through, and the
// scalar element conversions every path shares (the SIMD paths use them for tails, so a tail
// element gets exactly the bits the vector body would give it).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shoal::aggregator::internal {

using FoldFn = void (*)(float* acc, const void* x, size_t n, float w);
using ToF32Fn = void (*)(float* out, const void* x, size_t n);
using FromF32Fn = void (*)(void* out, const float* x, size_t n);
using AllFiniteFn = bool (*)(const void* x, size_t n);
using ScaleFn = void (*)(float* acc, size_t n, float a);

// Indexed by DType: kF32, kBF16, kF16.
struct FoldKernels {
  FoldFn fold[3];
  ToF32Fn to_f32[3];
  FromF32Fn from_f32[3];
  AllFiniteFn all_finite[3];
  ScaleFn scale;
};

extern const FoldKernels kScalarKernels;
#if defined(__x86_64__) || defined(__i386__)
extern const FoldKernels kAvx2Kernels;
extern const FoldKernels kAvx512Kernels;
#endif

// Unaligned element loads and stores (update tensors sit at any offset in a shm buffer).
inline uint16_t LoadU16(const void* p, size_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const char*>(p) + 2 * i, 2);
  return v;
}
inline float LoadF32(const void* p, size_t i) {
  float v;
  std::memcpy(&v, static_cast<const char*>(p) + 4 * i, 4);
  return v;
}
inline void StoreU16(void* p, size_t i, uint16_t v) {
  std::memcpy(static_cast<char*>(p) + 2 * i, &v, 2);
}

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

// Exact widening, bit-identical to F16C's vcvtph2ps (signalling NaNs come out quiet).
inline float F16ToF32(uint16_t h) {
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

// Round to nearest even; NaN stays NaN (quiet bit set, high payload kept).
inline uint16_t F32ToBf16(float f) {
  const uint32_t b = std::bit_cast<uint32_t>(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// Round to nearest even, bit-identical to F16C's vcvtps2ph with round-to-nearest.
inline uint16_t F32ToF16(float f) {
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

inline bool FiniteF32Bits(uint32_t b) { return (b & 0x7f800000u) != 0x7f800000u; }
inline bool FiniteBf16Bits(uint16_t h) { return (h & 0x7f80u) != 0x7f80u; }
inline bool FiniteF16Bits(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

}  // namespace shoal::aggregator::internal
