// Internal to shoal_fold: the loops of the SIMD paths, written once. A path's file defines
// SHOAL_FOLD_TARGET (its target attribute), includes this and instantiates SimdPath with its
// vector type V, whose static functions carry the same attribute:
//   F, kWidth (floats per vector), Set1, Load, Store, Fmadd, Mul, and Widen<E>(p) (kWidth
//   16-bit elements at p, as floats): SHOAL_FOLD_VECTOR_OPS below writes these;
//   kNarrowStep[E], Narrow<E>(out, x): kNarrowStep[E] floats rounded to 16-bit elements at out;
//   kFiniteStep[E], AnyNonFinite<E>(p): whether kFiniteStep[E] elements at p hold an Inf or NaN;
//   WidenI8(p): kWidth signed bytes at p, as floats (exact).
// Tails use the scalar element functions with a fused multiply-add, so every element gets the
// bits the vector body would give it. Unnamed namespace: each path compiles its own copy for its
// own target.
#pragma once

#ifndef SHOAL_FOLD_TARGET
#error "define SHOAL_FOLD_TARGET before including fold_simd.h"
#endif

#include "shoal/fl/kernels/fold_kernels.h"

// The float operations and the 16-bit widening of a vector type of BITS bits, whose intrinsics are
// named _mmBITS_* (the same names for 256 and 512 bits); HALF_PREFIX and HALF_BITS name the
// integer vector half its size, which holds the 16-bit elements that widen to one vector.
#define SHOAL_FOLD_VECTOR_OPS(BITS, HALF_PREFIX, HALF_BITS)                                 \
  using F = __m##BITS;                                                                      \
  static constexpr size_t kWidth = BITS / 32;                                               \
  SHOAL_FOLD_TARGET static F Set1(float v) { return _mm##BITS##_set1_ps(v); }               \
  SHOAL_FOLD_TARGET static F Load(const float* p) { return _mm##BITS##_loadu_ps(p); }       \
  SHOAL_FOLD_TARGET static void Store(float* p, F v) { _mm##BITS##_storeu_ps(p, v); }       \
  SHOAL_FOLD_TARGET static F Fmadd(F a, F b, F c) { return _mm##BITS##_fmadd_ps(a, b, c); } \
  SHOAL_FOLD_TARGET static F Mul(F a, F b) { return _mm##BITS##_mul_ps(a, b); }             \
  template <Elem E>                                                                         \
  SHOAL_FOLD_TARGET static F Widen(const char* p) {                                         \
    using Half = __m##HALF_BITS##i;                                                         \
    const Half h = HALF_PREFIX##_loadu_si##HALF_BITS(reinterpret_cast<const Half*>(p));     \
    if constexpr (E == kBf16) {                                                             \
      return _mm##BITS##_castsi##BITS##_ps(                                                 \
          _mm##BITS##_slli_epi32(_mm##BITS##_cvtepu16_epi32(h), 16));                       \
    } else {                                                                                \
      return _mm##BITS##_cvtph_ps(h);                                                       \
    }                                                                                       \
  }

namespace shoal::aggregator::internal {
namespace {

template <class V>
struct SimdPath {
  static constexpr size_t kW = V::kWidth;

  template <Elem E>
  SHOAL_FOLD_TARGET static typename V::F LoadVec(const void* x, size_t i) {
    if constexpr (E == kF32) {
      return V::Load(static_cast<const float*>(x) + i);
    } else {
      return V::template Widen<E>(static_cast<const char*>(x) + 2 * i);
    }
  }

  // Two vectors per step.
  template <Elem E>
  SHOAL_FOLD_TARGET static void Fold(float* acc, const void* x, size_t n, float w) {
    const typename V::F wv = V::Set1(w);
    size_t i = 0;
    for (; i + 2 * kW <= n; i += 2 * kW) {
      typename V::F a0 = V::Load(acc + i), a1 = V::Load(acc + i + kW);
      a0 = V::Fmadd(wv, LoadVec<E>(x, i), a0);
      a1 = V::Fmadd(wv, LoadVec<E>(x, i + kW), a1);
      V::Store(acc + i, a0);
      V::Store(acc + i + kW, a1);
    }
    for (; i < n; ++i) acc[i] = __builtin_fmaf(w, LoadElem<E>(x, i), acc[i]);
  }

  template <Elem E>
  SHOAL_FOLD_TARGET static void ToF32(float* out, const void* x, size_t n) {
    if constexpr (E == kF32) {
      CopyF32(out, x, n);
    } else {
      size_t i = 0;
      for (; i + kW <= n; i += kW) V::Store(out + i, LoadVec<E>(x, i));
      for (; i < n; ++i) out[i] = LoadElem<E>(x, i);
    }
  }

  template <Elem E>
  SHOAL_FOLD_TARGET static void FromF32(void* out, const float* x, size_t n) {
    if constexpr (E == kF32) {
      CopyF32(out, x, n);
    } else {
      constexpr size_t kStep = V::kNarrowStep[E];
      char* o = static_cast<char*>(out);
      size_t i = 0;
      for (; i + kStep <= n; i += kStep) V::template Narrow<E>(o + 2 * i, x + i);
      for (; i < n; ++i) StoreElem<E>(out, i, x[i]);
    }
  }

  // One early-exit test per kFiniteStep[E] elements: the scan stays bandwidth bound.
  template <Elem E>
  SHOAL_FOLD_TARGET static bool AllFinite(const void* x, size_t n) {
    constexpr size_t kStep = V::kFiniteStep[E];
    constexpr size_t kSize = E == kF32 ? 4 : 2;
    const char* p = static_cast<const char*>(x);
    size_t i = 0;
    for (; i + kStep <= n; i += kStep) {
      if (V::template AnyNonFinite<E>(p + kSize * i)) return false;
    }
    for (; i < n; ++i) {
      if (!FiniteElem<E>(x, i)) return false;
    }
    return true;
  }

  // A quantized block (fold_kernels.h, QuantLoops): a full one in vectors, the last (shorter)
  // one element by element with the same mul then fma, so both give the bits of dequantizing
  // (DequantBlock) then Fold<kF32>. kQ4's nibbles are first widened to bytes in a 64-byte
  // stack buffer (L1), never to floats in memory.
  template <Elem E>
  SHOAL_FOLD_TARGET static void FoldBlock(float* acc, const char* payload, size_t m, float scale,
                                          float w) {
    if (m == kQuantBlock) {
      alignas(64) char bytes[kQuantBlock];
      const char* q = payload;
      if constexpr (E == kQ4) q = ExpandNibbles(payload, bytes);
      const typename V::F sv = V::Set1(scale), wv = V::Set1(w);
      for (size_t j = 0; j < kQuantBlock; j += kW) {
        const typename V::F x = V::Mul(V::WidenI8(q + j), sv);
        V::Store(acc + j, V::Fmadd(wv, x, V::Load(acc + j)));
      }
      return;
    }
    for (size_t j = 0; j < m; ++j) {
      const float x = static_cast<float>(LoadQuant<E>(payload, j)) * scale;
      acc[j] = __builtin_fmaf(w, x, acc[j]);
    }
  }
  template <Elem E>
  SHOAL_FOLD_TARGET static void DequantBlock(float* out, const char* payload, size_t m,
                                             float scale) {
    if (m == kQuantBlock) {
      alignas(64) char bytes[kQuantBlock];
      const char* q = payload;
      if constexpr (E == kQ4) q = ExpandNibbles(payload, bytes);
      const typename V::F sv = V::Set1(scale);
      for (size_t j = 0; j < kQuantBlock; j += kW) V::Store(out + j, V::Mul(V::WidenI8(q + j), sv));
      return;
    }
    for (size_t j = 0; j < m; ++j) out[j] = static_cast<float>(LoadQuant<E>(payload, j)) * scale;
  }
  // 32 bytes of nibbles (kQuantBlock kQ4 values) to 64 signed bytes at out, in element order:
  // byte k's low nibble is element 2k, its high nibble element 2k + 1; (v ^ 8) - 8 sign-extends.
  SHOAL_FOLD_TARGET static const char* ExpandNibbles(const char* p, char* out) {
    const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int k = 0; k < 2; ++k) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
      const __m128i lo = _mm_and_si128(b, mask);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
      const __m128i e0 = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
      const __m128i e1 = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * k), e0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * k + 16), e1);
    }
    return out;
  }

  SHOAL_FOLD_TARGET static void Scale(float* acc, size_t n, float a) {
    const typename V::F av = V::Set1(a);
    size_t i = 0;
    for (; i + 2 * kW <= n; i += 2 * kW) {
      V::Store(acc + i, V::Mul(V::Load(acc + i), av));
      V::Store(acc + i + kW, V::Mul(V::Load(acc + i + kW), av));
    }
    for (; i < n; ++i) acc[i] *= a;
  }
};

}  // namespace
}  // namespace shoal::aggregator::internal
