// The binary body of a client's model update, and its parser. The gateway streams the body
// into one shared-memory buffer; aggregators read the tensors in place through the views that
// ParseUpdate returns, after it has checked everything a hostile client could send.
//
// Layout (all integers little-endian):
//   [0, 4)           magic "SHU1"
//   [4, 8)           u32 H: length of the header
//   [8, 8+H)         shoal.v1.UpdateHeader (proto/shoal/v1/fl.proto), protobuf bytes
//   [8+H, A)         zero padding, A = 8+H rounded up to a multiple of 64 (tensor area start)
//   [A, end)         tensor area: tensor i at A + tensors[i].offset, offset a multiple of 64,
//                    length = TensorBytes(dtype, product(shape)) (shoal/common/dtype.h: the
//                    element size times the count, or Q8/Q4's blocks), row-major; gaps are zero
//                    padding; the body ends exactly at the end of the last tensor
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/wire/dtype.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/fl/wire/update_prefix.h"

namespace shoal::v1 {
class UpdateHeader;
}

namespace shoal::model {

// What the tensors of an update hold (shoal.v1.UpdateKind).
enum class UpdateKind : uint8_t { kWeights = 0, kDelta = 1 };

// The UpdateHeader's fields other than the tensor table.
struct UpdateMeta {
  std::string job;
  std::string client_id;
  std::string token;
  uint64_t base_version = 0;
  uint64_t num_samples = 0;
  uint32_t local_steps = 0;
  double train_seconds = 0;
  UpdateKind kind = UpdateKind::kWeights;
};

// A float32 tensor to encode.
struct NamedTensor {
  std::string_view name;
  std::span<const uint64_t> shape;
  std::span<const float> values;
};

// Client side: the body for `tensors` (laid out in the given order) converted to `wire_dtype`.
// kInvalidArgument when a tensor's values do not match its shape.
Result<std::vector<std::byte>> EncodeUpdate(const UpdateMeta& meta,
                                            std::span<const NamedTensor> tensors, DType wire_dtype);
// Every tensor of `model`, in spec order.
Result<std::vector<std::byte>> EncodeUpdate(const UpdateMeta& meta, const Model& model,
                                            DType wire_dtype);

// Client side of secure aggregation: the masked input `masked` (Z_{2^32}, every tensor of
// `spec` back to back in spec order) as U32 tensors. kInvalidArgument when its length is not
// the model's parameter count.
Result<std::vector<std::byte>> EncodeMaskedUpdate(const UpdateMeta& meta, const ModelSpec& spec,
                                                  std::span<const uint32_t> masked);

struct ParseLimits {
  // Larger bodies are refused with kTooLarge (HTTP 413) before anything else is read.
  uint64_t max_body_bytes = uint64_t{4} << 30;
  uint32_t max_header_bytes = kMaxUpdateHeaderBytes;
  // The wire formats a job takes (spec.aggregation.wireFormats; a leaf sets them from its
  // environment); what re-parses an update already accepted takes every foldable one.
  std::vector<DType> allowed_dtypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8,
                                       DType::kQ4};
  // Appended to the "dtype X not allowed" message: what the job takes and where that is set,
  // e.g. " (spec.aggregation.wireFormats: f32, bf16)".
  std::string allowed_by;
  // Scan the tensors for NaN/Inf (and the block-quantized ones' scales for invalid ones).
  bool check_finite = true;
  // A HetLoRA job's (spec.aggregation.lora.method: hetlora): its "*.lora_A" [r, in] and
  // "*.lora_B" [out, r] tensors may come at a lower rank r_k, 1 <= r_k <= r, one rank for the
  // whole update, in f32, bf16 or f16 (TensorView::lora_rank; the fold zero-pads them,
  // shoal/fl/lora/lora_fold.h). A higher rank or another inner size is refused naming the tensor.
  bool lora_lower_rank = false;
};

// An update's prefix and header only (`body` may end after them: the coordinator admits an
// update on its head; the tensors are the leaf's to check); `head_bytes`: their length.
Status ParseUpdateHead(std::span<const std::byte> body, v1::UpdateHeader* h, size_t* head_bytes);

// One tensor of a parsed update, pointing into the body (no copy). `data` is 64-byte aligned
// when the body is.
struct TensorView {
  size_t index = 0;       // position in the ModelSpec
  std::string_view name;  // the ModelSpec's string
  DType dtype = DType::kF32;
  std::span<const uint64_t> shape;  // the ModelSpec's shape (the update's is equal, but below)
  uint64_t numel = 0;               // values sent
  // With ParseLimits::lora_lower_rank, a LoRA tensor's rank as sent (its shape is then
  // [lora_rank, in] for lora_A and [out, lora_rank] for lora_B, and numel is that shape's);
  // 0 for every other tensor.
  uint64_t lora_rank = 0;
  const std::byte* data = nullptr;
  uint64_t length = 0;  // bytes
};

struct UpdateView {
  UpdateMeta meta;
  std::vector<TensorView> tensors;  // one per model tensor, in ModelSpec order
  uint64_t tensor_area_offset = 0;  // where the tensor area starts in the body
};

// Validates `body` against `model` and returns views into it. Every malformed body gives
// kInvalidArgument with a message naming the field or tensor (see update_format.cc), except a
// body over limits.max_body_bytes, which gives kTooLarge. Never reads outside `body`.
Result<UpdateView> ParseUpdate(std::span<const std::byte> body, const ModelSpec& model,
                               const ParseLimits& limits = {});

}  // namespace shoal::model
