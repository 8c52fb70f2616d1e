// AVX2 + FMA + F16C path: 8 floats per vector, two vectors per step. Tails use the shared scalar
// element functions (with a fused multiply-add), so every element gets the same bits as the body.
#include "fold_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define SHOAL_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace shoal::aggregator::internal {
namespace {

SHOAL_AVX2 inline __m256 LoadBf16x8(const void* p) {
  const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
SHOAL_AVX2 inline __m256 LoadF16x8(const void* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
SHOAL_AVX2 inline const char* At(const void* p, size_t i, size_t size) {
  return static_cast<const char*>(p) + i * size;
}

SHOAL_AVX2 void FoldF32(float* acc, const void* x, size_t n, float w) {
  const __m256 wv = _mm256_set1_ps(w);
  const float* xf = static_cast<const float*>(x);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
    a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xf + i), a0);
    a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xf + i + 8), a1);
    _mm256_storeu_ps(acc + i, a0);
    _mm256_storeu_ps(acc + i + 8, a1);
  }
  for (; i < n; ++i) acc[i] = __builtin_fmaf(w, LoadF32(x, i), acc[i]);
}

SHOAL_AVX2 void FoldBf16(float* acc, const void* x, size_t n, float w) {
  const __m256 wv = _mm256_set1_ps(w);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
    a0 = _mm256_fmadd_ps(wv, LoadBf16x8(At(x, i, 2)), a0);
    a1 = _mm256_fmadd_ps(wv, LoadBf16x8(At(x, i + 8, 2)), a1);
    _mm256_storeu_ps(acc + i, a0);
    _mm256_storeu_ps(acc + i + 8, a1);
  }
  for (; i < n; ++i) acc[i] = __builtin_fmaf(w, Bf16ToFloat(LoadU16(x, i)), acc[i]);
}

SHOAL_AVX2 void FoldF16(float* acc, const void* x, size_t n, float w) {
  const __m256 wv = _mm256_set1_ps(w);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
    a0 = _mm256_fmadd_ps(wv, LoadF16x8(At(x, i, 2)), a0);
    a1 = _mm256_fmadd_ps(wv, LoadF16x8(At(x, i + 8, 2)), a1);
    _mm256_storeu_ps(acc + i, a0);
    _mm256_storeu_ps(acc + i + 8, a1);
  }
  for (; i < n; ++i) acc[i] = __builtin_fmaf(w, F16ToFloat(LoadU16(x, i)), acc[i]);
}

SHOAL_AVX2 void ToF32F32(float* out, const void* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}
SHOAL_AVX2 void ToF32Bf16(float* out, const void* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadBf16x8(At(x, i, 2)));
  for (; i < n; ++i) out[i] = Bf16ToFloat(LoadU16(x, i));
}
SHOAL_AVX2 void ToF32F16(float* out, const void* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadF16x8(At(x, i, 2)));
  for (; i < n; ++i) out[i] = F16ToFloat(LoadU16(x, i));
}

SHOAL_AVX2 void FromF32F32(void* out, const float* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}

// Round to nearest even on the bits; NaNs are quieted instead of rounded (rounding could carry a
// NaN's payload into Inf).
SHOAL_AVX2 inline __m256i RoundToBf16x8(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
  const __m256i abs = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

SHOAL_AVX2 void FromF32Bf16(void* out, const float* x, size_t n) {
  size_t i = 0;
  char* o = static_cast<char*>(out);
  for (; i + 16 <= n; i += 16) {
    const __m256i r0 = RoundToBf16x8(_mm256_loadu_ps(x + i));
    const __m256i r1 = RoundToBf16x8(_mm256_loadu_ps(x + i + 8));
    // packus interleaves 128-bit lanes: [r0 lo, r1 lo, r0 hi, r1 hi]; the permute restores order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * i), packed);
  }
  for (; i < n; ++i) StoreU16(out, i, FloatToBf16(x[i]));
}

SHOAL_AVX2 void FromF32F16(void* out, const float* x, size_t n) {
  size_t i = 0;
  char* o = static_cast<char*>(out);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * i), h);
  }
  for (; i < n; ++i) StoreU16(out, i, FloatToF16(x[i]));
}

// Checks 64 elements (f32) or 128 (16-bit) per early-exit test: the scan stays bandwidth bound.
SHOAL_AVX2 bool AllFiniteF32(const void* x, size_t n) {
  const __m256i m = _mm256_set1_epi32(0x7f800000);
  const char* p = static_cast<const char*>(x);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256i bad = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * (i + 8 * k)));
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(v, m), m));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  for (; i < n; ++i) {
    if (!FiniteF32Bits(std::bit_cast<uint32_t>(LoadF32(x, i)))) return false;
  }
  return true;
}

SHOAL_AVX2 bool AllFinite16(const void* x, size_t n, uint16_t exp_mask) {
  const __m256i m = _mm256_set1_epi16(static_cast<short>(exp_mask));
  const char* p = static_cast<const char*>(x);
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i bad = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * (i + 16 * k)));
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(_mm256_and_si256(v, m), m));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  for (; i < n; ++i) {
    if ((LoadU16(x, i) & exp_mask) == exp_mask) return false;
  }
  return true;
}
SHOAL_AVX2 bool AllFiniteBf16(const void* x, size_t n) { return AllFinite16(x, n, 0x7f80); }
SHOAL_AVX2 bool AllFiniteF16(const void* x, size_t n) { return AllFinite16(x, n, 0x7c00); }

SHOAL_AVX2 void ScaleF32(float* acc, size_t n, float a) {
  const __m256 av = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), av));
    _mm256_storeu_ps(acc + i + 8, _mm256_mul_ps(_mm256_loadu_ps(acc + i + 8), av));
  }
  for (; i < n; ++i) acc[i] *= a;
}

}  // namespace

const FoldKernels kAvx2Kernels = {
    {FoldF32, FoldBf16, FoldF16},
    {ToF32F32, ToF32Bf16, ToF32F16},
    {FromF32F32, FromF32Bf16, FromF32F16},
    {AllFiniteF32, AllFiniteBf16, AllFiniteF16},
    ScaleF32,
};

}  // namespace shoal::aggregator::internal

#endif  // x86
