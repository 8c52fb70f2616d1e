// An update folded part by part: each segment adds w * x (one tensor of the update, in its wire
// dtype) into its own range of a float32 accumulator, as a leaf folds one update's tensors into
// its partial sum. The CPU fold and the GPU folder (gpu_fold.h) take the same list.
#pragma once

#include <cstddef>
#include <span>

#include "shoal/common/status.h"
#include "shoal/fl/kernels/fold.h"

namespace shoal::aggregator {

// acc[0..n) += w * x[0..n).
struct FoldSegment {
  float* acc = nullptr;
  const void* x = nullptr;
  DType dtype = DType::kF32;
  size_t n = 0;
  float w = 0;
};

// The precondition of a folder that works on several segments at once (GpuFolder::FoldHost
// pipelines them: one segment's accumulator may be read before another's is written back):
// no two accumulator ranges overlap, and no update range overlaps an accumulator range.
// Update ranges may overlap each other (they are only read). Empty segments never overlap.
// InvalidArgument naming the two segments otherwise; O(s log s) in the number of segments.
Status CheckFoldSegments(std::span<const FoldSegment> segments);

// Every segment on the CPU, in order (Fold in fold.h): correct for any segments, overlapping
// or not.
void FoldSegments(std::span<const FoldSegment> segments);

}  // namespace shoal::aggregator
