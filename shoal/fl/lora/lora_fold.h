// Folding an update into a LoRA job's partial sum where the update's adapter has a lower rank
// than the job's (HetLoRA, Cho et al. 2024): the client's A_k [r_k, in] and B_k [out, r_k] are
// the job's A [r, in] and B [out, r] with the rows (A) and columns (B) past r_k zero, so the
// fold adds A_k into A's first r_k rows and B_k into B's first r_k columns and nothing else.
#pragma once

#include <cstdint>

#include "shoal/common/dtype.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::lora {

// acc, a [rows, acc_cols] float32 block, += w * x, a [rows, cols] block of `dtype` (f32, bf16
// or f16; cols <= acc_cols), into acc's first cols columns.
void FoldBlock(float* acc, uint64_t acc_cols, const void* x, DType dtype, uint64_t rows,
               uint64_t cols, float w);

// acc (every tensor of `spec`, spec order) += w * every tensor of `view` (parsed against
// `spec`), a lower-rank LoRA tensor (TensorView::lora_rank below the spec's) zero-padded.
void FoldUpdate(float* acc, const model::ModelSpec& spec, const model::UpdateView& view, float w);

}  // namespace shoal::lora
