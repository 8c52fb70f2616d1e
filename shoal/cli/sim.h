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

// `shoal sim train`: trains the learned policy in the simulator and writes its file.
struct SimTrainOptions {
  std::string out = "deploy/policies/learned-v2.json";
  uint64_t seed = 1000;
  int seeds = 16;
  int sizing_seeds = 8;
  double duration_scale = 1.0;
  std::string families;  // comma-separated; empty: the default training families
  bool evaluate = true;
};
int SimTrain(const SimTrainOptions& options);

}  // namespace shoal::cli
