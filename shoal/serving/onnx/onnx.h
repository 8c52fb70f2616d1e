// ONNX in and out, through the ONNX protobuf schema (libonnx-dev). Loading keeps opset-13
// semantics, turns initializers and Constant nodes into Graph initializers, takes the graph
// inputs that are not initializers, and validates the result; an operator Shoal does not run is
// refused with its name and node. Saving writes a ModelProto (IR 8, opset 13) that onnx's
// checker and other runtimes load.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

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

// The ONNX file at `path` as it is (its opset, nodes and constants), with the float initializers
// named in `weights` holding those values instead: an FL job's graph (spec.model.onnx) with a
// version's tensors. kInvalidArgument naming the initializer whose size or type differs, or
// when a name in `weights` is not an initializer of the file.
Result<std::string> OnnxFileWithWeights(
    const std::string& path, const std::map<std::string, std::vector<float>, std::less<>>& weights);

// The graph as serialized ModelProto bytes / written to `path`.
Result<std::string> SerializeOnnx(const Graph& graph);
Status SaveOnnx(const Graph& graph, const std::string& path);

}  // namespace shoal::inference
