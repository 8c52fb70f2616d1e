// The FL leaf aggregator (the built-in handler "fl-leaf"): folds each update it is sent into the
// partial sum the coordinator named for it, on the CPU or on a device folder (the GPU, where
// this build and the machine have one and the job allows it). A device error does not end the
// leaf: it answers that update 502 (the coordinator rebuilds the partial sum from the
// acknowledged updates before it commits, and the client sends the update again) and folds on
// the CPU from then on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/kernels/fold_segments.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {

// spec.aggregation.device (SHOAL_FL_AGG_DEVICE).
enum class LeafFoldDevice { kAuto, kCpu, kGpu };

// Where a leaf folds besides the CPU: the GPU folder in CUDA builds; tests give their own.
class LeafDeviceFolder {
 public:
  virtual ~LeafDeviceFolder() = default;
  // For the log: "GPU (device 0)".
  virtual std::string Describe() const = 0;
  // Prepares the tenant pool's mapping (the GPU pins it: ~0.9 s per GiB), once.
  virtual Status Attach(void* base, size_t bytes) = 0;
  // acc += w * x for every segment (host memory), all done when it returns. After an error the
  // accumulators may hold part of the update.
  virtual Status Fold(std::span<const aggregator::FoldSegment> segments) = 0;
};

struct FlLeafOptions {
  LeafFoldDevice device = LeafFoldDevice::kAuto;
  // kAuto: updates smaller than this fold on the CPU (a device's fixed cost per tensor, tens of
  // µs of copies and launches, exceeds a CPU fold of a small model).
  uint64_t device_min_update_bytes = uint64_t{4} << 20;
  // Attach beside the event loop (updates fold on the CPU until it is done), or in
  // OnPoolAttached itself.
  bool attach_in_background = true;
  // false (SHOAL_FL_FOLD=none: a job with spec.aggregation.robust): the leaf validates each
  // update (structure, finiteness) and answers 202 without folding it; the coordinator runs the
  // robust rule over the updates in the pool at commit and names no partial sum.
  bool fold = true;
  // SHOAL_FL_FOLD=u32 (spec.privacy.secureAggregation): updates are masked U32 inputs, folded
  // into a u32 partial sum by wrapping adds (FoldU32); any other dtype is refused.
  bool fold_u32 = false;
  // spec.aggregation.wireFormats (SHOAL_FL_WIRE_FORMATS): the update formats taken; any other
  // is refused with 400 naming the field. kQ8/kQ4 are folded without being expanded, on the CPU.
  std::vector<DType> wire_formats = {DType::kF32, DType::kBF16, DType::kF16};
  // spec.aggregation.lora.method hetlora (SHOAL_FL_LORA_METHOD): LoRA tensors may come at a
  // lower rank than the job's; such an update is folded zero-padded on the CPU
  // (shoal/fl/lora/lora_fold.h).
  bool lora_lower_rank = false;
};

// A leaf for `spec` that folds on `device` when options allow (none: the CPU only).
std::unique_ptr<Handler> CreateFlLeafHandler(model::ModelSpec spec, const FlLeafOptions& options,
                                             std::unique_ptr<LeafDeviceFolder> device);

// The leaf shoald starts: the model from SHOAL_FL_ARCH, SHOAL_FL_HIDDEN and SHOAL_FL_INPUTS (or
// SHOAL_FL_ONNX, or SHOAL_FL_LORA_SHAPE/RANK/TARGETS with SHOAL_FL_LORA_METHOD), the
// device from SHOAL_FL_AGG_DEVICE (auto, cpu, gpu), the GPU folder where there is one, whether
// it folds from SHOAL_FL_FOLD (sum, the default, or none), the formats it takes from
// SHOAL_FL_WIRE_FORMATS.
Result<std::unique_ptr<Handler>> CreateFlLeafHandler();

// The GPU folder (GpuFolder::FoldHost through the pinned pool); kUnavailable with the reason
// where this build has no CUDA or the machine no device.
Result<std::unique_ptr<LeafDeviceFolder>> CreateGpuLeafFolder();

}  // namespace shoal
