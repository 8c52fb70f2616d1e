// An FL job's model as an inference graph: the architecture's graph (architectures_graph.h)
// with a model version's values. The tensor names are the ModelSpec's, so a newer version
// reaches a running graph through Graph::SetWeights(WeightsOf(model)).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/serving/graph/graph.h"

namespace shoal::inference {

// kInvalidArgument naming the architecture, or the first tensor whose name or shape differs
// between `weights` and the architecture's spec.
Result<Graph> GraphFromArchitecture(std::string_view name,
                                    const model::ArchitectureOptions& options,
                                    const model::Model& weights);

// The architecture an FL job's status (GET /v1/jobs/{job}) describes in its "model" object:
// the architecture's name and its widths (hidden; inputs and classes, the architecture's
// defaults when absent, as from a shoald that did not write them).
struct JobArchitecture {
  std::string name;
  model::ArchitectureOptions options;
  std::string onnx;  // spec.model.onnx (architecture "onnx"): the graph's file on the node
};
// kInvalidArgument when the status names no architecture.
Result<JobArchitecture> JobArchitectureFromStatus(std::string_view job_status_json);

// Every tensor of `m` by name, as Graph::SetWeights takes them.
std::map<std::string, std::vector<float>, std::less<>> WeightsOf(const model::Model& m);

}  // namespace shoal::inference
