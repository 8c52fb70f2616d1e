// CUDA runtime errors as Status values: every CUDA call in Shoal goes through SHOAL_CUDA_TRY so a
// failure reaches the caller as "<call>: <cudaGetErrorString> (<cudaGetErrorName>)" instead of
// being lost. Header-only; included only by code built with the CUDA Toolkit.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "shoal/common/status.h"

namespace shoal {

inline Status CudaStatus(const char* what, cudaError_t err) {
  // No device, no driver, or a driver too old for this runtime: the machine, not a bug.
  const bool unavailable = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
                           err == cudaErrorInitializationError ||
                           err == cudaErrorDevicesUnavailable;
  std::string msg =
      std::string(what) + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
  return unavailable ? Unavailable(std::move(msg)) : Internal(std::move(msg));
}

// "no CUDA device: <reason>" when no device is usable, empty when one is.
inline std::string CudaDeviceProblem() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return std::string("no CUDA device: ") + cudaGetErrorString(err);
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount found 0 devices";
  return {};
}

}  // namespace shoal

#define SHOAL_CUDA_TRY(call)                              \
  do {                                                    \
    const cudaError_t shoal_cuda_err_ = (call);           \
    if (shoal_cuda_err_ != cudaSuccess) {                 \
      return ::shoal::CudaStatus(#call, shoal_cuda_err_); \
    }                                                     \
  } while (0)
