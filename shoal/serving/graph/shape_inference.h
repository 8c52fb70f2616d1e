// Per-operator shape rules (ONNX opset 13) used by Graph::InferShapes, and the attribute
// helpers the executors share with them, so "what a Conv's pads mean" is written once.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference {

// The output shape of `node` given its input shapes (nullptr for an omitted optional input).
// Errors name the node and the offending input or attribute.
Result<std::vector<int64_t>> InferNodeShape(const Graph& g, const Node& node,
                                            const std::vector<const std::vector<int64_t>*>& in);

// A 2-D window (Conv, MaxPool, AveragePool) with defaults filled in and checked.
struct Window2d {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 2> dilations{1, 1};
  std::array<int64_t, 2> pad_begin{0, 0};  // top, left
  std::array<int64_t, 2> pad_end{0, 0};    // bottom, right
  int64_t group = 1;                       // Conv only
};

// `kernel_hw` is the kernel from the weights (Conv) or {0,0} (pools: kernel_shape required).
Result<Window2d> ReadWindow(const Node& node, std::array<int64_t, 2> kernel_hw);
// floor((in + pads - dilated kernel) / stride) + 1, or an error naming the node if < 1.
Result<std::array<int64_t, 2>> WindowOutput(const Node& node, const Window2d& w,
                                            std::array<int64_t, 2> in_hw);

// Normalises a possibly negative axis against `rank`; -1 if out of range.
int64_t NormaliseAxis(int64_t axis, int64_t rank, bool allow_rank = false);

}  // namespace shoal::inference
