#include "shoal/fl/lora/lora_fold.h"

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/lora/lora_spec.h"

namespace shoal::lora {

void FoldBlock(float* acc, uint64_t acc_cols, const void* x, DType dtype, uint64_t rows,
               uint64_t cols, float w) {
  if (cols == acc_cols) {  // the whole tensor: one contiguous fold
    aggregator::Fold(acc, x, dtype, rows * cols, w);
    return;
  }
  const auto* src = static_cast<const std::byte*>(x);
  const size_t row_bytes = cols * DTypeSize(dtype);
  for (uint64_t i = 0; i < rows; ++i) {
    aggregator::Fold(acc + i * acc_cols, src + i * row_bytes, dtype, cols, w);
  }
}

void FoldUpdate(float* acc, const model::ModelSpec& spec, const model::UpdateView& view, float w) {
  for (const model::TensorView& t : view.tensors) {
    float* dst = acc + spec.offset(t.index);
    const auto& shape = spec.tensor(t.index).shape;
    if (t.lora_rank != 0 && IsLoraB(t.name) && t.lora_rank < shape[1]) {
      FoldBlock(dst, shape[1], t.data, t.dtype, shape[0], t.lora_rank, w);
    } else {
      // lora_A at a lower rank is the first lora_rank rows of [r, in]: a prefix (numel says).
      aggregator::Fold(dst, t.data, t.dtype, t.numel, w);
    }
  }
}

}  // namespace shoal::lora
