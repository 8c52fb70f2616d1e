#include "shoal/serving/model/model_graph.h"

#include <nlohmann/json.hpp>

#include "shoal/serving/graph/architectures_graph.h"

namespace shoal::inference {
namespace {

using json = nlohmann::json;

// A positive integer field of `o`, or `fallback`.
uint64_t Width(const json& o, const char* key, uint64_t fallback) {
  return o.contains(key) && o[key].is_number_unsigned() && o[key].get<uint64_t>() > 0
             ? o[key].get<uint64_t>()
             : fallback;
}

}  // namespace

Result<JobArchitecture> JobArchitectureFromStatus(std::string_view job_status_json) {
  const json st = json::parse(job_status_json, nullptr, false);
  const json m = st.is_object() ? st.value("model", json::object()) : json::object();
  if (!m.is_object() || !m.contains("architecture") || !m["architecture"].is_string() ||
      m["architecture"].get<std::string>().empty()) {
    return InvalidArgument("its status names no model architecture");
  }
  JobArchitecture a;
  a.name = m["architecture"].get<std::string>();
  a.options.hidden = {Width(m, "hidden", a.options.hidden.at(0))};
  a.options.inputs = Width(m, "inputs", a.options.inputs);
  a.options.classes = Width(m, "classes", a.options.classes);
  if (m.contains("onnx") && m["onnx"].is_string()) a.onnx = m["onnx"].get<std::string>();
  return a;
}

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
