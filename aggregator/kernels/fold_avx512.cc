// AVX-512F path: 16 floats per vector, two vectors per step. Only AVX-512F instructions (no BW or
// VL), so it runs on every AVX-512 CPU. Tails use the shared scalar element functions.
#include "fold_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports a false "maybe-uninitialized" inside avx512fintrin.h (the _mm512_undefined_*
// idiom) once its intrinsics are inlined into a target("avx512f") function.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define SHOAL_AVX512 __attribute__((target("avx512f")))

namespace shoal::aggregator::internal {
namespace {

SHOAL_AVX512 inline const char* At(const void* p, size_t i, size_t size) {
  return static_cast<const char*>(p) + i * size;
}
SHOAL_AVX512 inline __m512 LoadBf16x16(const void* p) {
  const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
SHOAL_AVX512 inline __m512 LoadF16x16(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

SHOAL_AVX512 void FoldF32(float* acc, const void* x, size_t n, float w) {
  const __m512 wv = _mm512_set1_ps(w);
  const float* xf = static_cast<const float*>(x);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16);
    a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xf + i), a0);
    a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xf + i + 16), a1);
    _mm512_storeu_ps(acc + i, a0);
    _mm512_storeu_ps(acc + i + 16, a1);
  }
  for (; i < n; ++i) acc[i] = __builtin_fmaf(w, LoadF32(x, i), acc[i]);
}

SHOAL_AVX512 void FoldBf16(float* acc, const void* x, size_t n, float w) {
  const __m512 wv = _mm512_set1_ps(w);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16);
    a0 = _mm512_fmadd_ps(wv, LoadBf16x16(At(x, i, 2)), a0);
    a1 = _mm512_fmadd_ps(wv, LoadBf16x16(At(x, i + 16, 2)), a1);
    _mm512_storeu_ps(acc + i, a0);
    _mm512_storeu_ps(acc + i + 16, a1);
  }
  for (; i < n; ++i) acc[i] = __builtin_fmaf(w, Bf16ToFloat(LoadU16(x, i)), acc[i]);
}

SHOAL_AVX512 void FoldF16(float* acc, const void* x, size_t n, float w) {
  const __m512 wv = _mm512_set1_ps(w);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16);
    a0 = _mm512_fmadd_ps(wv, LoadF16x16(At(x, i, 2)), a0);
    a1 = _mm512_fmadd_ps(wv, LoadF16x16(At(x, i + 16, 2)), a1);
    _mm512_storeu_ps(acc + i, a0);
    _mm512_storeu_ps(acc + i + 16, a1);
  }
  for (; i < n; ++i) acc[i] = __builtin_fmaf(w, F16ToFloat(LoadU16(x, i)), acc[i]);
}

SHOAL_AVX512 void ToF32F32(float* out, const void* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}
SHOAL_AVX512 void ToF32Bf16(float* out, const void* x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, LoadBf16x16(At(x, i, 2)));
  for (; i < n; ++i) out[i] = Bf16ToFloat(LoadU16(x, i));
}
SHOAL_AVX512 void ToF32F16(float* out, const void* x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, LoadF16x16(At(x, i, 2)));
  for (; i < n; ++i) out[i] = F16ToFloat(LoadU16(x, i));
}

SHOAL_AVX512 void FromF32F32(void* out, const float* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}

SHOAL_AVX512 void FromF32Bf16(void* out, const float* x, size_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i qbit = _mm512_set1_epi32(0x40), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i absm = _mm512_set1_epi32(0x7fffffff);
  char* o = static_cast<char*>(out);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i b = _mm512_loadu_si512(x + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, bias), lsb), 16);
    // NaNs are quieted instead of rounded (rounding could carry a NaN's payload into Inf).
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, absm), inf);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(b, 16), qbit));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) StoreU16(out, i, FloatToBf16(x[i]));
}

SHOAL_AVX512 void FromF32F16(void* out, const float* x, size_t n) {
  char* o = static_cast<char*>(out);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * i), h);
  }
  for (; i < n; ++i) StoreU16(out, i, FloatToF16(x[i]));
}

// One early-exit test per 128 elements (f32) or 256 (16-bit): the scan stays bandwidth bound.
SHOAL_AVX512 bool AllFiniteF32(const void* x, size_t n) {
  const __m512i m = _mm512_set1_epi32(0x7f800000);
  const char* p = static_cast<const char*>(x);
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __mmask16 bad = 0;
    for (int k = 0; k < 8; ++k) {
      const __m512i v = _mm512_loadu_si512(p + 4 * (i + 16 * k));
      bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, m), m);
    }
    if (bad) return false;
  }
  for (; i < n; ++i) {
    if (!FiniteF32Bits(std::bit_cast<uint32_t>(LoadF32(x, i)))) return false;
  }
  return true;
}

// Without AVX-512BW there are no 16-bit compares: look at each 32-bit lane as two halves. A half
// is Inf/NaN when none of its exponent bits is clear, i.e. (~v & exp) is zero in that half.
SHOAL_AVX512 bool AllFinite16(const void* x, size_t n, uint16_t exp_mask) {
  const __m512i m = _mm512_set1_epi32(static_cast<int>(exp_mask * 0x10001u));
  const __m512i lo = _mm512_set1_epi32(0x0000ffff), hi = _mm512_set1_epi32(-65536);
  const char* p = static_cast<const char*>(x);
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __mmask16 bad = 0;
    for (int k = 0; k < 8; ++k) {
      const __m512i v = _mm512_loadu_si512(p + 2 * (i + 32 * k));
      const __m512i clear = _mm512_andnot_si512(v, m);
      bad |= _mm512_testn_epi32_mask(clear, lo) | _mm512_testn_epi32_mask(clear, hi);
    }
    if (bad) return false;
  }
  for (; i < n; ++i) {
    if ((LoadU16(x, i) & exp_mask) == exp_mask) return false;
  }
  return true;
}
SHOAL_AVX512 bool AllFiniteBf16(const void* x, size_t n) { return AllFinite16(x, n, 0x7f80); }
SHOAL_AVX512 bool AllFiniteF16(const void* x, size_t n) { return AllFinite16(x, n, 0x7c00); }

SHOAL_AVX512 void ScaleF32(float* acc, size_t n, float a) {
  const __m512 av = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(acc + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), av));
    _mm512_storeu_ps(acc + i + 16, _mm512_mul_ps(_mm512_loadu_ps(acc + i + 16), av));
  }
  for (; i < n; ++i) acc[i] *= a;
}

}  // namespace

const FoldKernels kAvx512Kernels = {
    {FoldF32, FoldBf16, FoldF16},
    {ToF32F32, ToF32Bf16, ToF32F16},
    {FromF32F32, FromF32Bf16, FromF32F16},
    {AllFiniteF32, AllFiniteBf16, AllFiniteF16},
    ScaleF32,
};

}  // namespace shoal::aggregator::internal
#endif  // x86
