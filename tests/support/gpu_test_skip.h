// When a GPU test may skip: only when no device is visible to this process (no /dev/nvidiaN
// node). Where a device node exists, any CUDA error (a driver/runtime mismatch, a CUDA module
// that fails to load) is a failure, not a missing GPU; and SHOAL_REQUIRE_GPU=1 (set by
// scripts/gpu-check) turns every skip into a failure. Header-only; GoogleTest or minitest.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace shoal::gpu_test {

// "" when a GPU test may skip here; otherwise why a skip would hide a failure.
inline std::string SkipForbidden() {
  if (const char* r = std::getenv("SHOAL_REQUIRE_GPU"); r != nullptr && std::string(r) == "1") {
    return "SHOAL_REQUIRE_GPU=1";
  }
  for (int i = 0; i < 16; ++i) {
    const std::string node = "/dev/nvidia" + std::to_string(i);
    if (access(node.c_str(), F_OK) == 0) {
      return node + " exists: a device is present, so this is a failure, not a missing GPU";
    }
  }
  return {};
}

}  // namespace shoal::gpu_test

// Skips the test with `reason` where no device is visible; fails it with `reason` otherwise.
#define SHOAL_GPU_SKIP(reason)                                                      \
  do {                                                                              \
    const std::string shoal_gpu_why_ = (reason);                                    \
    const std::string shoal_gpu_forbidden_ = ::shoal::gpu_test::SkipForbidden();    \
    if (!shoal_gpu_forbidden_.empty()) {                                            \
      FAIL() << shoal_gpu_why_ << " [not skipped: " << shoal_gpu_forbidden_ << "]"; \
    }                                                                               \
    GTEST_SKIP() << shoal_gpu_why_;                                                 \
  } while (0)
