#pragma once

#include <cstdint>
#include <string>

namespace shoal::cli {

struct SimOptions {
  std::string policy = "shoal";
  std::string workload = "bursty";
  std::string trace;
  uint64_t seed = 42;
  double duration_scale = 1.0;
};

int Simulate(const SimOptions& options);

}  // namespace shoal::cli
