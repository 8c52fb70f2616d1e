#include "shoal/inference/model_graph.h"

#include "shoal/inference/architectures_graph.h"

namespace shoal::inference {

std::map<std::string, std::vector<float>, std::less<>> WeightsOf(const model::Model& m) {
  std::map<std::string, std::vector<float>, std::less<>> out;
  for (size_t i = 0; i < m.spec.size(); ++i) {
    const auto t = m.tensor(i);
    out[m.spec.tensor(i).name].assign(t.begin(), t.end());
  }
  return out;
}

Result<Graph> GraphFromArchitecture(std::string_view name,
                                    const model::ArchitectureOptions& options,
                                    const model::Model& weights) {
  auto spec = model::ArchitectureSpec(name, options);
  if (!spec.ok()) return spec.status();
  const auto inputs = static_cast<int64_t>(options.inputs);
  const auto classes = static_cast<int64_t>(options.classes);
  Graph g;
  if (name == "logreg") {
    g = LogRegGraph(inputs, classes);
  } else if (name == "mlp") {
    g = MlpGraph(inputs, std::vector<int64_t>(options.hidden.begin(), options.hidden.end()),
                 classes);
  } else {
    g = CnnGraph(static_cast<int64_t>(options.hidden.at(0)), classes);
  }
  // The weights must be this architecture's, tensor for tensor.
  if (weights.spec.size() != spec->size()) {
    return InvalidArgument("model has " + std::to_string(weights.spec.size()) +
                           " tensors; architecture '" + std::string(name) + "' has " +
                           std::to_string(spec->size()));
  }
  for (size_t i = 0; i < spec->size(); ++i) {
    const model::TensorSpec &want = spec->tensor(i), &got = weights.spec.tensor(i);
    if (want.name != got.name || want.shape != got.shape) {
      return InvalidArgument("model tensor '" + got.name + "' " + model::ShapeString(got.shape) +
                             " does not match architecture '" + std::string(name) + "' tensor '" +
                             want.name + "' " + model::ShapeString(want.shape));
    }
  }
  SHOAL_RETURN_IF_ERROR(g.SetWeights(WeightsOf(weights)));
  SHOAL_RETURN_IF_ERROR(g.Validate());
  return g;
}

}  // namespace shoal::inference
