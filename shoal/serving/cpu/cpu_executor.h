// The CPU executor: oneDNN primitives (matmul and convolution with bias and ReLU fused, pooling,
// softmax, binary add), one plan per batch-size bucket (1, 2, 4, ... max_batch) built at
// Compile with every intermediate placed in one arena, so Run allocates nothing. A batch runs
// on the smallest bucket that holds it. fp32 everywhere; bf16 where oneDNN implements it on
// this CPU (AVX-512), else kUnavailable; fp16 is kUnavailable on CPUs without AVX512-FP16.
#pragma once

#include <memory>

#include "shoal/serving/executor/executor.h"

namespace shoal::inference {

Result<std::unique_ptr<Executor>> CreateCpuExecutor();

}  // namespace shoal::inference
