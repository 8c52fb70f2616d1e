// The portable path: plain loops, no FMA (acc + w * x, two roundings). Also the reference the
// SIMD paths are tested against, apart from their fused multiply-add.
#include "fold_kernels.h"

namespace shoal::aggregator::internal {
namespace {

struct ScalarPath {
  template <Elem E>
  static void Fold(float* acc, const void* x, size_t n, float w) {
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + w * LoadElem<E>(x, i);
  }
  template <Elem E>
  static void ToF32(float* out, const void* x, size_t n) {
    if constexpr (E == kF32) {
      CopyF32(out, x, n);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = LoadElem<E>(x, i);
    }
  }
  template <Elem E>
  static void FromF32(void* out, const float* x, size_t n) {
    if constexpr (E == kF32) {
      CopyF32(out, x, n);
    } else {
      for (size_t i = 0; i < n; ++i) StoreElem<E>(out, i, x[i]);
    }
  }
  template <Elem E>
  static bool AllFinite(const void* x, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (!FiniteElem<E>(x, i)) return false;
    }
    return true;
  }
  template <Elem E>
  static size_t FoldFinite(float* acc, const void* x, size_t n, float w, size_t block) {
    constexpr size_t kSize = E == kF32 ? 4 : 2;
    const char* p = static_cast<const char*>(x);
    for (size_t i = 0; i < n; i += block) {
      const size_t m = n - i < block ? n - i : block;
      if (!AllFinite<E>(p + kSize * i, m)) return i;
      Fold<E>(acc + i, p + kSize * i, m, w);
    }
    return n;
  }
  static void Scale(float* acc, size_t n, float a) {
    for (size_t i = 0; i < n; ++i) acc[i] *= a;
  }
};

}  // namespace

constinit const FoldKernels kScalarKernels = MakeFoldKernels<ScalarPath>();

}  // namespace shoal::aggregator::internal
