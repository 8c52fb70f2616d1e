// ONNX in and out, through the ONNX protobuf schema (libonnx-dev). Loading keeps opset-13
// semantics, turns initializers and Constant nodes into Graph initializers, takes the graph
// inputs that are not initializers, and validates the result; an operator Shoal does not run is
// refused with its name and node. Saving writes a ModelProto (IR 8, opset 13) that onnx's
// checker and other runtimes load.
#pragma once

#include <string>
#include <string_view>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference {

struct OnnxLoadOptions {
  // Fold BatchNormalization into the preceding Conv/Gemm (see FoldBatchNorm). Off when the
  // caller wants to SetWeights with the file's original tensor names first.
  bool fold_batchnorm = true;
};

// kNotFound when the file cannot be read; kInvalidArgument for anything wrong inside it.
Result<Graph> LoadOnnx(const std::string& path, const OnnxLoadOptions& options = {});
Result<Graph> LoadOnnxBytes(std::string_view bytes, const OnnxLoadOptions& options = {});

// The graph as serialized ModelProto bytes / written to `path`.
Result<std::string> SerializeOnnx(const Graph& graph);
Status SaveOnnx(const Graph& graph, const std::string& path);

}  // namespace shoal::inference
