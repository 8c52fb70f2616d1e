// The boundary between the CUDA executor's loader (cuda_loader.cc, linked into every program
// that links shoal_inference) and the executor itself (libshoal_inference_cuda.so, loaded with
// dlopen on the first CreateCudaExecutor call). The module carries cuBLASLt, cuDNN and the CUDA
// runtime: linked directly they would cost every shoal-fn ~150 ms and ~200 MB at start, GPU
// or not. Both sides are built from this tree by one compiler, so C++ types cross it.
#pragma once

#include <cstddef>
#include <memory>

#include "shoal/common/status.h"
#include "shoal/serving/executor/executor.h"

namespace shoal::inference {

// 2: Executable::execution_mode().
inline constexpr int kCudaModuleApiVersion = 2;

struct CudaModuleApi {
  int version;
  Result<std::unique_ptr<Executor>> (*create)();
  Status (*pin)(void* base, size_t bytes);
  Status (*unpin)(void* base);
};

}  // namespace shoal::inference

// Exported by the module: the table above.
extern "C" const shoal::inference::CudaModuleApi* shoal_cuda_module_api();
