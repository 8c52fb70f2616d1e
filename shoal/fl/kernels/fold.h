// The aggregation fold: a leaf aggregator adds each arriving model update (a tensor in float32,
// bfloat16 or float16, read in place from shared memory) into a float32 running weighted sum.
// Memory-bandwidth bound, so one pass over each update, vectorised; the instruction set is chosen
// once at run time (AVX-512F, AVX2+FMA+F16C, scalar) and the binary runs on any x86-64.
//
// Rounding, stated once for every function here:
//  - Fold on the AVX2 and AVX-512 paths uses fused multiply-add: acc[i] = fma(w, x[i], acc[i]),
//    one rounding, bit-identical to std::fma. The scalar path computes acc[i] + w * x[i] with two
//    roundings (it is the fallback for CPUs without FMA). On any one step the two differ by the
//    product's rounding: at most half an ulp of w * x plus one ulp of the result.
//  - bf16 and fp16 are widened exactly; narrowing (ConvertFromF32) rounds to nearest, ties to
//    even, keeps Inf, keeps NaN a NaN of the same sign (quieted, payload truncated as F16C does),
//    produces fp16 subnormals correctly, and overflows to Inf. All paths give the same bits.
// Pointers need no alignment; n may be anything, including 0.
//
// Block-quantized updates (kQ8, kQ4; layout in shoal/common/dtype.h) go through the same
// functions, folded without expanding them: x is the tensor's bytes from a block's start (for
// a part of a tensor, ElementOffset(dtype, i) with i a multiple of kQuantBlock), and each value
// is float(q) * scale, rounded once, then folded as an f32 value would be, so Fold equals
// ConvertToF32 then Fold(kF32) bit for bit on every path. For them AllFinite means every
// block's scale is valid (ValidQuantScaleBits), FoldFinite stops at the first block whose scale
// is not (its `block` is not used), and ConvertFromF32 quantizes (symmetric, per block).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shoal/common/dtype.h"

namespace shoal::aggregator {

// Shoal's one element-type enum. The functions below take its floating types (kF32, kBF16,
// kF16) and its block-quantized ones (kQ8, kQ4); any other is a caller's bug and aborts naming
// it.
using shoal::DType;
using shoal::DTypeName;
using shoal::DTypeSize;

// acc[i] += w * float(x[i]) for i in [0, n). Single thread; see FoldPool for many.
void Fold(float* acc, const void* x, DType dtype, size_t n, float w);

// acc[i] *= a (e.g. dividing a weighted sum by the total weight).
void Scale(float* acc, size_t n, float a);

// out[i] = float(x[i]): exact widening.
void ConvertToF32(float* out, const void* x, DType dtype, size_t n);

// out[i] = dtype(x[i]), round to nearest even (a copy for kF32).
void ConvertFromF32(void* out, const float* x, DType dtype, size_t n);

// False if any element is NaN or +-Inf. Used to refuse a bad update before it is folded in.
bool AllFinite(const void* x, DType dtype, size_t n);

// Fold and AllFinite in one pass over x, for a caller that must not fold a non-finite update
// but reads it only once: block by block (`block` elements; 0 counts as 1), each block is
// tested for NaN and +-Inf and, when finite, folded while it is still in L1/L2. Returns the
// elements folded: n when all were finite, else the start of the first block holding a
// non-finite element; acc[0, returned) got exactly Fold's bits, acc from there on is untouched.
size_t FoldFinite(float* acc, const void* x, DType dtype, size_t n, float w, size_t block);

// ---- Instruction-set paths -------------------------------------------------------------------

enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };

// kAvx2 needs AVX2 + FMA + F16C; kAvx512 needs AVX-512F (and the OS saving zmm state, which
// __builtin_cpu_supports checks). kScalar always works. False on non-x86 builds for the SIMD ones.
bool IsaSupported(Isa isa);
const char* IsaName(Isa isa);  // "scalar", "avx2", "avx512"

// The path the functions above use: the best the CPU supports, chosen on first use. The
// environment variable SHOAL_FOLD_ISA=scalar|avx2|avx512 lowers it (for comparisons); a path
// the CPU lacks is ignored there.
Isa ActiveIsa();
const char* FoldIsa();  // IsaName(ActiveIsa())

// The same functions on a named path, for tests and benchmarks. Precondition: IsaSupported(isa);
// an unsupported isa aborts rather than executing an illegal instruction.
void FoldWithIsa(Isa isa, float* acc, const void* x, DType dtype, size_t n, float w);
void ScaleWithIsa(Isa isa, float* acc, size_t n, float a);
void ConvertToF32WithIsa(Isa isa, float* out, const void* x, DType dtype, size_t n);
void ConvertFromF32WithIsa(Isa isa, void* out, const float* x, DType dtype, size_t n);
bool AllFiniteWithIsa(Isa isa, const void* x, DType dtype, size_t n);
size_t FoldFiniteWithIsa(Isa isa, float* acc, const void* x, DType dtype, size_t n, float w,
                         size_t block);

}  // namespace shoal::aggregator
