// AVX-512F path: 16 floats per vector; the loops are SimdPath's (fold_simd.h). Only AVX-512F
// instructions (no BW or VL), so it runs on every AVX-512 CPU.
#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports a false "maybe-uninitialized" inside avx512fintrin.h (the _mm512_undefined_*
// idiom) once its intrinsics are inlined into a target("avx512f") function.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define SHOAL_FOLD_TARGET __attribute__((target("avx512f")))
#include "shoal/fl/kernels/fold_simd.h"

namespace shoal::aggregator::internal {
namespace {

struct Avx512 {
  SHOAL_FOLD_VECTOR_OPS(512, _mm256, 256)
  // One vector per narrowing step; the Inf/NaN scan tests 8 vectors at a time.
  static constexpr size_t kNarrowStep[3] = {0, 16, 16};
  static constexpr size_t kFiniteStep[3] = {128, 256, 256};

  SHOAL_FOLD_TARGET static F WidenI8(const char* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }

  template <Elem E>
  SHOAL_FOLD_TARGET static void Narrow(char* out, const float* x) {
    if constexpr (E == kBf16) {
      const __m512i b = _mm512_loadu_si512(x);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
      // NaNs are quieted instead of rounded (rounding could carry a NaN's payload into Inf).
      const __mmask16 nan = _mm512_cmpgt_epi32_mask(
          _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
      r = _mm512_mask_mov_epi32(r, nan,
                                _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
    } else {
      const __m256i h =
          _mm512_cvtps_ph(_mm512_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
    }
  }

  // Without AVX-512BW there are no 16-bit compares: a 32-bit lane is looked at as two halves. A
  // half is Inf/NaN when none of its exponent bits is clear, i.e. (~v & exp) is zero in it.
  template <Elem E>
  SHOAL_FOLD_TARGET static bool AnyNonFinite(const char* p) {
    __mmask16 bad = 0;
    for (int k = 0; k < 8; ++k) {
      const __m512i v = _mm512_loadu_si512(p + 64 * k);
      if constexpr (E == kF32) {
        const __m512i m = _mm512_set1_epi32(0x7f800000);
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, m), m);
      } else {
        const __m512i m = _mm512_set1_epi32(E == kBf16 ? 0x7f807f80 : 0x7c007c00);
        const __m512i clear = _mm512_andnot_si512(v, m);
        bad |= _mm512_testn_epi32_mask(clear, _mm512_set1_epi32(0x0000ffff)) |
               _mm512_testn_epi32_mask(clear, _mm512_set1_epi32(-65536));
      }
    }
    return bad != 0;
  }
};

}  // namespace

constinit const FoldKernels kAvx512Kernels = MakeFoldKernels<SimdPath<Avx512>>();

}  // namespace shoal::aggregator::internal
#endif  // x86
