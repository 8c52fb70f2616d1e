// The CUDA executor: runs a validated Graph on one NVIDIA GPU with cuBLASLt (Gemm/MatMul with
// bias and ReLU epilogues), cuDNN (convolution) and Shoal's own kernels (pooling, softmax,
// elementwise), in fp32, fp16 or bf16, with every device buffer planned at Compile and one CUDA
// graph per batch-size bucket (powers of two up to max_batch) captured on first use. Built when
// CMake finds nvcc (SHOAL_WITH_CUDA); CreateExecutor("cuda"|"auto") is how callers reach it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "shoal/common/status.h"
#include "shoal/serving/executor/executor.h"

namespace shoal::inference {

// kUnavailable "no CUDA device: <reason>" when no device is usable.
Result<std::unique_ptr<Executor>> CreateCudaExecutor();

// Pins host memory (the tenant pool's mapping) so that Run's input copies from it go at the
// pinned rate without a staging copy; ~0.9 s per GiB, so once per mapping. Unpin with
// UnpinHostMemory before unmapping.
Status PinHostMemory(void* base, size_t bytes);
Status UnpinHostMemory(void* base);

}  // namespace shoal::inference
