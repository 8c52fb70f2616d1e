// An FL job's model version as an ONNX file: the architecture the job's status describes, built
// as a graph with the version's tensors (the safetensors shoald hands out) as its weights,
// serialized as opset 13. One conversion for both `shoal fl model --format onnx` and shoald's
// GET /v1/jobs/{job}/model?format=onnx, so the two give the same bytes.
#pragma once

#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::inference {

// `job_status_json`: the job's status (GET /v1/jobs/{job}), whose "model" object names the
// architecture and its widths (hidden; inputs and classes, the architecture's defaults when
// absent), or the ONNX file of a spec.model.onnx job (its graph with the version's tensors as
// its float initializers: readable where this runs, which for shoald is always). kInvalidArgument
// when the status names no architecture, or naming what of `safetensors` does not fit it.
Result<std::string> JobModelAsOnnx(std::string_view job_status_json, std::string_view safetensors);

}  // namespace shoal::inference
