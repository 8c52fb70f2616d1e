// The secure-aggregation fold: acc[i] += x[i] modulo 2^32 over masked u32 updates (SecAgg+'s
// inputs live in Z_{2^32}, and masks cancel only in the wrapping sum). Memory-bound like the
// float fold: one pass, vectorised (AVX-512F, AVX2, scalar; the path fold.h's ActiveIsa picks),
// no alignment needed; bit-identical on every path (integer adds).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shoal/fl/kernels/fold.h"

namespace shoal::aggregator {

// acc[i] += x[i] (mod 2^32), x read unaligned (an update tensor in the pool).
void FoldU32(uint32_t* acc, const void* x, size_t n);
void FoldU32WithIsa(Isa isa, uint32_t* acc, const void* x, size_t n);

}  // namespace shoal::aggregator
