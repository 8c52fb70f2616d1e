// Constant folding for one batch size: every node whose inputs are known at load (initializers,
// shapes, what was folded before it) and that has a plain kernel (ops.h) is evaluated here, in
// double, so the shape subgraphs torch.onnx.export writes (Shape -> Gather -> Concat ->
// Reshape, masks from Range/Equal/Where) leave nothing to run. What is left are the nodes that
// read the graph's input; their shapes are all known.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference {

struct FoldedGraph {
  int64_t batch = 0;
  std::map<std::string, std::vector<int64_t>> shapes;  // every tensor of the graph
  // Folded tensors that the remaining nodes read (the graph's own initializers are not copied).
  std::map<std::string, Initializer, std::less<>> constants;
  std::vector<Node> nodes;  // the nodes left to run, in order
};

// Errors name the node (an operator without a shape rule, a parameter that is not constant).
Result<FoldedGraph> FoldConstants(const Graph& g, int64_t batch);

}  // namespace shoal::inference
