// The portable path: plain loops, no FMA (acc + w * x, two roundings). Also the reference the
// SIMD paths are tested against, apart from their fused multiply-add.
#include "shoal/fl/kernels/fold_kernels.h"

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
  // The quantized rows' blocks: the same acc + w * x as Fold, x = float(q) * scale.
  template <Elem E>
  static void FoldBlock(float* acc, const char* payload, size_t m, float scale, float w) {
    for (size_t j = 0; j < m; ++j) {
      const float x = static_cast<float>(LoadQuant<E>(payload, j)) * scale;
      acc[j] = acc[j] + w * x;
    }
  }
  template <Elem E>
  static void DequantBlock(float* out, const char* payload, size_t m, float scale) {
    for (size_t j = 0; j < m; ++j) out[j] = static_cast<float>(LoadQuant<E>(payload, j)) * scale;
  }
  static void Scale(float* acc, size_t n, float a) {
    for (size_t i = 0; i < n; ++i) acc[i] *= a;
  }
};

}  // namespace

constinit const FoldKernels kScalarKernels = MakeFoldKernels<ScalarPath>();

}  // namespace shoal::aggregator::internal
