// Internal to shoal_fold: the per-ISA kernel tables that fold.cc dispatches through. Every path
// converts single elements with shoal/common/dtype_convert.h (the SIMD paths for their tails, so
// a tail element gets exactly the bits the vector body would give it).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shoal/common/dtype_convert.h"

namespace shoal::aggregator::internal {

using FoldFn = void (*)(float* acc, const void* x, size_t n, float w);
using ToF32Fn = void (*)(float* out, const void* x, size_t n);
using FromF32Fn = void (*)(void* out, const float* x, size_t n);
using AllFiniteFn = bool (*)(const void* x, size_t n);
using ScaleFn = void (*)(float* acc, size_t n, float a);
// FoldFinite (fold.h): block by block, the Inf/NaN test then the fold; the elements folded.
using FoldFiniteFn = size_t (*)(float* acc, const void* x, size_t n, float w, size_t block);

// Indexed by DType: kF32, kBF16, kF16 (the floating types; fold.cc refuses any other).
struct FoldKernels {
  FoldFn fold[3];
  ToF32Fn to_f32[3];
  FromF32Fn from_f32[3];
  AllFiniteFn all_finite[3];
  FoldFiniteFn fold_finite[3];
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

inline bool FiniteF32Bits(uint32_t b) { return (b & 0x7f800000u) != 0x7f800000u; }
inline bool FiniteBf16Bits(uint16_t h) { return (h & 0x7f80u) != 0x7f80u; }
inline bool FiniteF16Bits(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

// The tables' rows, in DType order. Each path writes its kernels once as templates over Elem.
enum Elem : int { kF32 = 0, kBf16 = 1, kF16 = 2 };

// Element i of x as a float (exact), the narrowing store, and the Inf/NaN test on the bits.
template <Elem E>
inline float LoadElem(const void* x, size_t i) {
  if constexpr (E == kF32) return LoadF32(x, i);
  if constexpr (E == kBf16) return Bf16ToFloat(LoadU16(x, i));
  if constexpr (E == kF16) return F16ToFloat(LoadU16(x, i));
}
template <Elem E>
  requires(E != kF32)
inline void StoreElem(void* out, size_t i, float v) {
  StoreU16(out, i, E == kBf16 ? FloatToBf16(v) : FloatToF16(v));
}
template <Elem E>
inline bool FiniteElem(const void* x, size_t i) {
  if constexpr (E == kF32) return FiniteF32Bits(std::bit_cast<uint32_t>(LoadF32(x, i)));
  if constexpr (E == kBf16) return FiniteBf16Bits(LoadU16(x, i));
  if constexpr (E == kF16) return FiniteF16Bits(LoadU16(x, i));
}
inline void CopyF32(void* out, const void* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}

// One pass for the check and the fold, over a path's own AllFinite<E> and Fold<E>: each block is
// tested, then folded while its bytes are still in L1/L2. Per element the same arithmetic as
// Fold, so the bits do not depend on where blocks start. Returns the elements folded (the bad
// block's start when one holds an Inf or NaN).
template <class P, Elem E>
size_t BlockwiseFoldFinite(float* acc, const void* x, size_t n, float w, size_t block) {
  constexpr size_t kSize = E == kF32 ? 4 : 2;
  const char* p = static_cast<const char*>(x);
  for (size_t i = 0; i < n; i += block) {
    const size_t m = n - i < block ? n - i : block;
    if (!P::template AllFinite<E>(p + kSize * i, m)) return i;
    P::template Fold<E>(acc + i, p + kSize * i, m, w);
  }
  return n;
}

// A path's table from a type P with static Fold<E>, ToF32<E>, FromF32<E>, AllFinite<E>, Scale.
template <class P>
constexpr FoldKernels MakeFoldKernels() {
  return {
      {P::template Fold<kF32>, P::template Fold<kBf16>, P::template Fold<kF16>},
      {P::template ToF32<kF32>, P::template ToF32<kBf16>, P::template ToF32<kF16>},
      {P::template FromF32<kF32>, P::template FromF32<kBf16>, P::template FromF32<kF16>},
      {P::template AllFinite<kF32>, P::template AllFinite<kBf16>, P::template AllFinite<kF16>},
      {BlockwiseFoldFinite<P, kF32>, BlockwiseFoldFinite<P, kBf16>, BlockwiseFoldFinite<P, kF16>},
      P::Scale,
  };
}

}  // namespace shoal::aggregator::internal
