// AVX2 + FMA + F16C path: 8 floats per vector; the loops are SimdPath's (fold_simd.h).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define SHOAL_FOLD_TARGET __attribute__((target("avx2,fma,f16c")))
#include "shoal/fl/kernels/fold_simd.h"

namespace shoal::aggregator::internal {
namespace {

struct Avx2 {
  SHOAL_FOLD_VECTOR_OPS(256, _mm, 128)
  // bf16 narrows two vectors per step (one pack); the Inf/NaN scan tests 8 vectors at a time.
  static constexpr size_t kNarrowStep[3] = {0, 16, 8};
  static constexpr size_t kFiniteStep[3] = {64, 128, 128};

  SHOAL_FOLD_TARGET static F WidenI8(const char* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }

  // Round to nearest even on the bits; NaNs are quieted instead of rounded (rounding could carry
  // a NaN's payload into Inf).
  SHOAL_FOLD_TARGET static __m256i RoundToBf16(F v) {
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    const __m256i abs = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, quiet, nan);
  }

  template <Elem E>
  SHOAL_FOLD_TARGET static void Narrow(char* out, const float* x) {
    if constexpr (E == kBf16) {
      const __m256i r0 = RoundToBf16(_mm256_loadu_ps(x));
      const __m256i r1 = RoundToBf16(_mm256_loadu_ps(x + 8));
      // packus interleaves 128-bit lanes: [r0 lo, r1 lo, r0 hi, r1 hi]; the permute restores
      // order.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
    } else {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
    }
  }

  template <Elem E>
  SHOAL_FOLD_TARGET static bool AnyNonFinite(const char* p) {
    __m256i bad = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
      if constexpr (E == kF32) {
        const __m256i m = _mm256_set1_epi32(0x7f800000);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(v, m), m));
      } else {
        const __m256i m = _mm256_set1_epi16(static_cast<short>(E == kBf16 ? 0x7f80 : 0x7c00));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(_mm256_and_si256(v, m), m));
      }
    }
    return !_mm256_testz_si256(bad, bad);
  }
};

}  // namespace

constinit const FoldKernels kAvx2Kernels = MakeFoldKernels<SimdPath<Avx2>>();

}  // namespace shoal::aggregator::internal

#endif  // x86
