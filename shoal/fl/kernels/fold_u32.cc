#include "shoal/fl/kernels/fold_u32.h"

#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace shoal::aggregator {
namespace {

void FoldU32Scalar(uint32_t* acc, const void* x, size_t n) {
  const char* p = static_cast<const char*>(x);
  for (size_t i = 0; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    acc[i] += v;
  }
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) void FoldU32Avx2(uint32_t* acc, const void* x, size_t n) {
  const char* p = static_cast<const char*>(x);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (size_t k = 0; k < 32; k += 8) {
      auto* a = reinterpret_cast<__m256i*>(acc + i + k);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * (i + k)));
      _mm256_storeu_si256(a, _mm256_add_epi32(_mm256_loadu_si256(a), v));
    }
  }
  FoldU32Scalar(acc + i, p + 4 * i, n - i);
}

__attribute__((target("avx512f"))) void FoldU32Avx512(uint32_t* acc, const void* x, size_t n) {
  const char* p = static_cast<const char*>(x);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (size_t k = 0; k < 64; k += 16) {
      void* a = acc + i + k;
      const __m512i v = _mm512_loadu_si512(p + 4 * (i + k));
      _mm512_storeu_si512(a, _mm512_add_epi32(_mm512_loadu_si512(a), v));
    }
  }
  FoldU32Scalar(acc + i, p + 4 * i, n - i);
}
#endif

}  // namespace

void FoldU32WithIsa(Isa isa, uint32_t* acc, const void* x, size_t n) {
  if (!IsaSupported(isa)) std::abort();  // a caller's bug: never an illegal instruction
  switch (isa) {
#if defined(__x86_64__) || defined(__i386__)
    case Isa::kAvx512:
      return FoldU32Avx512(acc, x, n);
    case Isa::kAvx2:
      return FoldU32Avx2(acc, x, n);
#endif
    default:
      return FoldU32Scalar(acc, x, n);
  }
}

void FoldU32(uint32_t* acc, const void* x, size_t n) { FoldU32WithIsa(ActiveIsa(), acc, x, n); }

}  // namespace shoal::aggregator
