// Internal to shoal_fold: the per-ISA kernel tables that fold.cc dispatches through. Every path
// converts single elements with shoal/common/dtype_convert.h (the SIMD paths for their tails, so
// a tail element gets exactly the bits the vector body would give it).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shoal/common/dtype.h"
#include "shoal/common/dtype_convert.h"

namespace shoal::aggregator::internal {

using FoldFn = void (*)(float* acc, const void* x, size_t n, float w);
using ToF32Fn = void (*)(float* out, const void* x, size_t n);
using FromF32Fn = void (*)(void* out, const float* x, size_t n);
using AllFiniteFn = bool (*)(const void* x, size_t n);
using ScaleFn = void (*)(float* acc, size_t n, float a);
// FoldFinite (fold.h): block by block, the Inf/NaN test then the fold; the elements folded.
using FoldFiniteFn = size_t (*)(float* acc, const void* x, size_t n, float w, size_t block);

// Indexed by Elem (below): kF32, kBF16, kF16, then the block-quantized kQ8, kQ4 (fold.cc
// maps a DType to its row and refuses any other). For the quantized rows, AllFinite means every
// block's scale is valid, FromF32 quantizes, and FoldFinite's block is the quantization block.
inline constexpr int kFoldRows = 5;
struct FoldKernels {
  FoldFn fold[kFoldRows];
  ToF32Fn to_f32[kFoldRows];
  FromF32Fn from_f32[kFoldRows];
  AllFiniteFn all_finite[kFoldRows];
  FoldFiniteFn fold_finite[kFoldRows];
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

// The tables' rows. Each path writes its kernels once as templates over Elem.
enum Elem : int { kF32 = 0, kBf16 = 1, kF16 = 2, kQ8 = 3, kQ4 = 4 };

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

// ---- Block-quantized rows (DType kQ8, kQ4; the layout is in shoal/common/dtype.h) --------------

template <Elem E>
  requires(E == kQ8 || E == kQ4)
constexpr DType QuantDType() {
  return E == kQ8 ? DType::kQ8 : DType::kQ4;
}

// Value j of a block's payload, as a signed integer.
template <Elem E>
inline int LoadQuant(const char* payload, size_t j) {
  if constexpr (E == kQ8) {
    return static_cast<int8_t>(payload[j]);
  } else {
    const auto b = static_cast<uint8_t>(payload[j / 2]);
    const int v = (j & 1) ? (b >> 4) : (b & 15);
    return (v ^ 8) - 8;
  }
}
inline uint32_t LoadScaleBits(const char* block) {
  uint32_t b;
  std::memcpy(&b, block, 4);
  return b;
}

// The block loops, written once over a path's two block kernels (m <= kQuantBlock values at
// payload, scale s): P::FoldBlock<E>(acc, payload, m, s, w), acc[j] += w * (float(q_j) * s) with
// the path's fold arithmetic, and P::DequantBlock<E>(out, payload, m, s), out[j] = float(q_j) *
// s. The fused fold never writes the dequantized values anywhere; per element it computes the
// same float(q) * s that dequantizing computes and then the same step that Fold<kF32> takes, so
// the two agree bit for bit. x starts at a block; n values from there.
template <class P, Elem E>
struct QuantLoops {
  static constexpr DType kD = QuantDType<E>();
  template <typename F>
  static size_t ForBlocks(const void* x, size_t n, F f) {
    const char* p = static_cast<const char*>(x);
    for (size_t i = 0; i < n; i += kQuantBlock) {
      const size_t m = n - i < kQuantBlock ? n - i : kQuantBlock;
      if (!f(i, p, m)) return i;
      p += QuantBlockBytes(kD, m);
    }
    return n;
  }
  static float ScaleOf(const char* block) { return std::bit_cast<float>(LoadScaleBits(block)); }
  static void Fold(float* acc, const void* x, size_t n, float w) {
    ForBlocks(x, n, [&](size_t i, const char* b, size_t m) {
      P::template FoldBlock<E>(acc + i, b + 4, m, ScaleOf(b), w);
      return true;
    });
  }
  static void ToF32(float* out, const void* x, size_t n) {
    ForBlocks(x, n, [&](size_t i, const char* b, size_t m) {
      P::template DequantBlock<E>(out + i, b + 4, m, ScaleOf(b));
      return true;
    });
  }
  static bool AllFinite(const void* x, size_t n) {
    return ForBlocks(x, n, [](size_t, const char* b, size_t) {
             return ValidQuantScaleBits(LoadScaleBits(b));
           }) == n;
  }
  // Each block's scale is tested just before the block is folded; `block` is not used (the
  // quantization block is the unit). Returns the elements folded.
  static size_t FoldFinite(float* acc, const void* x, size_t n, float w, size_t /*block*/) {
    return ForBlocks(x, n, [&](size_t i, const char* b, size_t m) {
      if (!ValidQuantScaleBits(LoadScaleBits(b))) return false;
      P::template FoldBlock<E>(acc + i, b + 4, m, ScaleOf(b), w);
      return true;
    });
  }
  // Symmetric quantization, the same on every path: scale = max|x| / qmax (clamped to
  // kMaxQuantScale; +0 for a block of zeros), q = round-half-even(x / scale) clamped to
  // [-qmax, qmax]; NaN counts as 0.
  static void FromF32(void* out, const float* x, size_t n) {
    constexpr int kQmax = E == kQ8 ? 127 : 7;
    char* p = static_cast<char*>(out);
    for (size_t i = 0; i < n; i += kQuantBlock) {
      const size_t m = n - i < kQuantBlock ? n - i : kQuantBlock;
      float amax = 0;
      for (size_t j = 0; j < m; ++j) {
        const float a = __builtin_fabsf(x[i + j]);
        if (a > amax) amax = a;
      }
      float scale = amax / static_cast<float>(kQmax);
      if (!(scale <= kMaxQuantScale)) scale = kMaxQuantScale;
      std::memcpy(p, &scale, 4);
      char* q = p + 4;
      if constexpr (E == kQ4) std::memset(q, 0, (m + 1) / 2);
      for (size_t j = 0; j < m; ++j) {
        float r = scale > 0 ? __builtin_nearbyintf(x[i + j] / scale) : 0.0f;
        if (!(r >= -kQmax)) r = r != r ? 0.0f : static_cast<float>(-kQmax);
        if (r > kQmax) r = static_cast<float>(kQmax);
        const int v = static_cast<int>(r);
        if constexpr (E == kQ8) {
          q[j] = static_cast<char>(static_cast<int8_t>(v));
        } else {
          q[j / 2] = static_cast<char>(q[j / 2] | ((v & 15) << ((j & 1) * 4)));
        }
      }
      p += QuantBlockBytes(kD, m);
    }
  }
};

// A path's table from a type P with static Fold<E>, ToF32<E>, FromF32<E>, AllFinite<E>, Scale
// (the floating rows) and FoldBlock<E>, DequantBlock<E> (the quantized rows).
template <class P>
constexpr FoldKernels MakeFoldKernels() {
  using Q8 = QuantLoops<P, kQ8>;
  using Q4 = QuantLoops<P, kQ4>;
  return {
      {P::template Fold<kF32>, P::template Fold<kBf16>, P::template Fold<kF16>, Q8::Fold, Q4::Fold},
      {P::template ToF32<kF32>, P::template ToF32<kBf16>, P::template ToF32<kF16>, Q8::ToF32,
       Q4::ToF32},
      {P::template FromF32<kF32>, P::template FromF32<kBf16>, P::template FromF32<kF16>,
       Q8::FromF32, Q4::FromF32},
      {P::template AllFinite<kF32>, P::template AllFinite<kBf16>, P::template AllFinite<kF16>,
       Q8::AllFinite, Q4::AllFinite},
      {BlockwiseFoldFinite<P, kF32>, BlockwiseFoldFinite<P, kBf16>, BlockwiseFoldFinite<P, kF16>,
       Q8::FoldFinite, Q4::FoldFinite},
      P::Scale,
  };
}

}  // namespace shoal::aggregator::internal
