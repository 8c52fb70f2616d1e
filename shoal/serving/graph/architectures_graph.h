// Graphs of Shoal's built-in FL architectures (logreg, mlp, cnn; tensor names and layouts equal
// shoal/fl/wire/architectures.h, so Graph::SetWeights takes an FL model version directly) and a
// torchvision-layout ResNet for tests and benchmarks. Plain C++: the GPU-only build has them.
// Every graph reads "input" (batch first) and writes "logits".
#pragma once

#include <cstdint>
#include <vector>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference {

inline constexpr char kGraphInput[] = "input";
inline constexpr char kGraphOutput[] = "logits";

// The FL architectures with zero weights: input [N,inputs] (logreg, mlp) or [N,1,28,28] (cnn).
Graph LogRegGraph(int64_t inputs, int64_t classes);
Graph MlpGraph(int64_t inputs, const std::vector<int64_t>& hidden, int64_t classes);
Graph CnnGraph(int64_t hidden, int64_t classes);

// torchvision's ResNet with BasicBlocks (ResNet-18 by default): conv1/bn1, layer{i}.{j}.conv1,
// .bn1, .conv2, .bn2, .downsample.0/.1, fc; BatchNormalization after every conv (not folded).
struct ResNetOptions {
  std::vector<int64_t> widths = {64, 128, 256, 512};
  std::vector<int64_t> blocks = {2, 2, 2, 2};
  int64_t image = 224;  // input is [N,3,image,image]
  int64_t classes = 1000;
  bool small_stem = false;  // 3x3 stride-1 conv1 and no max-pool (CIFAR style, small images)
  uint64_t seed = 1;        // weights and BN statistics drawn deterministically from it
};
Graph ResNetGraph(const ResNetOptions& options = {});

}  // namespace shoal::inference
