// The portable path: plain loops, no FMA (acc + w * x, two roundings). Also the reference the
// SIMD paths are tested against, apart from their fused multiply-add.
#include "fold_kernels.h"

namespace shoal::aggregator::internal {
namespace {

void FoldF32(float* acc, const void* x, size_t n, float w) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + w * LoadF32(x, i);
}
void FoldBf16(float* acc, const void* x, size_t n, float w) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + w * Bf16ToFloat(LoadU16(x, i));
}
void FoldF16(float* acc, const void* x, size_t n, float w) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + w * F16ToFloat(LoadU16(x, i));
}

void ToF32F32(float* out, const void* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}
void ToF32Bf16(float* out, const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(LoadU16(x, i));
}
void ToF32F16(float* out, const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F16ToFloat(LoadU16(x, i));
}

void FromF32F32(void* out, const float* x, size_t n) {
  if (n) std::memmove(out, x, n * 4);
}
void FromF32Bf16(void* out, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) StoreU16(out, i, FloatToBf16(x[i]));
}
void FromF32F16(void* out, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) StoreU16(out, i, FloatToF16(x[i]));
}

bool AllFiniteF32(const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!FiniteF32Bits(std::bit_cast<uint32_t>(LoadF32(x, i)))) return false;
  }
  return true;
}
bool AllFiniteBf16(const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!FiniteBf16Bits(LoadU16(x, i))) return false;
  }
  return true;
}
bool AllFiniteF16(const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!FiniteF16Bits(LoadU16(x, i))) return false;
  }
  return true;
}

void ScaleF32(float* acc, size_t n, float a) {
  for (size_t i = 0; i < n; ++i) acc[i] *= a;
}

}  // namespace

const FoldKernels kScalarKernels = {
    {FoldF32, FoldBf16, FoldF16},
    {ToF32F32, ToF32Bf16, ToF32F16},
    {FromF32F32, FromF32Bf16, FromF32F16},
    {AllFiniteF32, AllFiniteBf16, AllFiniteF16},
    ScaleF32,
};

}  // namespace shoal::aggregator::internal
