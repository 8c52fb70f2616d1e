// An ONNX graph as an FL job's model (spec.model.onnx): the job's tensors are the graph's float
// initializers in name order, their values the initial model. The exporter's own constants
// (torch names them "onnx::..." or "/...") and scalars are not tensors of the job. Clients train
// the same architecture in PyTorch and push its state_dict under the same names; an inference
// function serving the job loads the same file and replaces those initializers per version.
#pragma once

#include <string>

#include "shoal/common/status.h"
#include "shoal/fl/wire/model_spec.h"

namespace shoal::inference {

// kInvalidArgument naming the file when it does not load or holds no trainable tensor.
Result<model::Model> OnnxModel(const std::string& path);

}  // namespace shoal::inference
