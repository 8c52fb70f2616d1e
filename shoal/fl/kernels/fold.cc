// Dispatch: the instruction-set path is chosen once (first use) from what the CPU supports,
// optionally lowered by SHOAL_FOLD_ISA, and every call goes through that path's kernel table.
#include "shoal/fl/kernels/fold.h"

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "shoal/common/enum_names.h"
#include "shoal/fl/kernels/fold_kernels.h"

namespace shoal::aggregator {
namespace {

using internal::FoldKernels;

constexpr EnumName<Isa> kIsaNames[] = {
    {Isa::kScalar, "scalar"}, {Isa::kAvx2, "avx2"}, {Isa::kAvx512, "avx512"}};

// The kernel tables hold the floating and the block-quantized types (fold_kernels.h's Elem
// order): anything else would index past them.
int Index(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return internal::kF32;
    case DType::kBF16:
      return internal::kBf16;
    case DType::kF16:
      return internal::kF16;
    case DType::kQ8:
      return internal::kQ8;
    case DType::kQ4:
      return internal::kQ4;
    case DType::kI64:
    case DType::kU32:
      break;
  }
  std::fprintf(stderr, "shoal_fold: element type %s is not a floating or quantized type\n",
               DTypeName(dtype).data());
  std::abort();
}

const FoldKernels& TableFor(Isa isa) {
  if (!IsaSupported(isa)) {
    std::fprintf(stderr, "shoal_fold: instruction set %s not supported on this CPU\n",
                 IsaName(isa));
    std::abort();
  }
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kAvx512:
      return internal::kAvx512Kernels;
    case Isa::kAvx2:
      return internal::kAvx2Kernels;
    case Isa::kScalar:
      break;
  }
#endif
  return internal::kScalarKernels;
}

Isa DetectIsa() {
  Isa best = Isa::kScalar;
  if (IsaSupported(Isa::kAvx512)) {
    best = Isa::kAvx512;
  } else if (IsaSupported(Isa::kAvx2)) {
    best = Isa::kAvx2;
  }
  if (const char* env = std::getenv("SHOAL_FOLD_ISA")) {
    const std::optional<Isa> asked = ValueOf(kIsaNames, env);
    if (asked && IsaSupported(*asked) && *asked < best) best = *asked;
  }
  return best;
}

const FoldKernels& Active() {
  static const FoldKernels& kernels = TableFor(ActiveIsa());
  return kernels;
}

}  // namespace

bool IsaSupported(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // idempotent; needed if called from another static initializer
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

const char* IsaName(Isa isa) { return NameOf(kIsaNames, isa, "?"); }

Isa ActiveIsa() {
  static const Isa isa = DetectIsa();
  return isa;
}

const char* FoldIsa() { return IsaName(ActiveIsa()); }

void Fold(float* acc, const void* x, DType dtype, size_t n, float w) {
  Active().fold[Index(dtype)](acc, x, n, w);
}
void Scale(float* acc, size_t n, float a) { Active().scale(acc, n, a); }
void ConvertToF32(float* out, const void* x, DType dtype, size_t n) {
  Active().to_f32[Index(dtype)](out, x, n);
}
void ConvertFromF32(void* out, const float* x, DType dtype, size_t n) {
  Active().from_f32[Index(dtype)](out, x, n);
}
bool AllFinite(const void* x, DType dtype, size_t n) {
  return Active().all_finite[Index(dtype)](x, n);
}

size_t FoldFinite(float* acc, const void* x, DType dtype, size_t n, float w, size_t block) {
  return Active().fold_finite[Index(dtype)](acc, x, n, w, block == 0 ? 1 : block);
}

void FoldWithIsa(Isa isa, float* acc, const void* x, DType dtype, size_t n, float w) {
  TableFor(isa).fold[Index(dtype)](acc, x, n, w);
}
void ScaleWithIsa(Isa isa, float* acc, size_t n, float a) { TableFor(isa).scale(acc, n, a); }
void ConvertToF32WithIsa(Isa isa, float* out, const void* x, DType dtype, size_t n) {
  TableFor(isa).to_f32[Index(dtype)](out, x, n);
}
void ConvertFromF32WithIsa(Isa isa, void* out, const float* x, DType dtype, size_t n) {
  TableFor(isa).from_f32[Index(dtype)](out, x, n);
}
bool AllFiniteWithIsa(Isa isa, const void* x, DType dtype, size_t n) {
  return TableFor(isa).all_finite[Index(dtype)](x, n);
}
size_t FoldFiniteWithIsa(Isa isa, float* acc, const void* x, DType dtype, size_t n, float w,
                         size_t block) {
  return TableFor(isa).fold_finite[Index(dtype)](acc, x, n, w, block == 0 ? 1 : block);
}

}  // namespace shoal::aggregator
