// CreateExecutor: the one place that knows which executors this build has. The CPU executor
// is in every full build; the CUDA one only when CMake built shoal/serving/cuda (SHOAL_WITH_CUDA),
// which provides CreateCudaExecutor (kUnavailable with the reason when no device is visible).
#include <string>

#include "shoal/serving/executor/executor.h"
#ifdef SHOAL_HAVE_CPU_EXECUTOR
#include "shoal/serving/cpu/cpu_executor.h"
#endif

namespace shoal::inference {

#ifdef SHOAL_HAVE_CUDA_EXECUTOR
Result<std::unique_ptr<Executor>> CreateCudaExecutor();  // shoal/serving/cuda
#endif

namespace {

Result<std::unique_ptr<Executor>> Cuda() {
#ifdef SHOAL_HAVE_CUDA_EXECUTOR
  return CreateCudaExecutor();
#else
  return Unavailable("this build has no CUDA executor");
#endif
}

Result<std::unique_ptr<Executor>> Cpu() {
#ifdef SHOAL_HAVE_CPU_EXECUTOR
  return CreateCpuExecutor();
#else
  return Unavailable("this build has no CPU executor (oneDNN was not found)");
#endif
}

}  // namespace

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kF32:
      return "fp32";
    case Precision::kF16:
      return "fp16";
    case Precision::kBF16:
      return "bf16";
  }
  return "?";
}

Result<std::unique_ptr<Executor>> CreateExecutor(std::string_view kind) {
  if (kind == "cpu") return Cpu();
  if (kind == "cuda") return Cuda();
  if (kind == "auto") {
    auto cuda = Cuda();
    if (cuda.ok()) return cuda;
    return Cpu();
  }
  return InvalidArgument("unknown executor '" + std::string(kind) + "' (cpu, cuda or auto)");
}

bool CudaAvailable(std::string* reason) {
  auto cuda = Cuda();
  if (!cuda.ok() && reason != nullptr) *reason = cuda.status().message();
  return cuda.ok();
}

}  // namespace shoal::inference
