#include "shoal/serving/onnxmodel/onnx_model.h"

#include <algorithm>

#include "shoal/serving/onnx/onnx.h"

namespace shoal::inference {

Result<model::Model> OnnxModel(const std::string& path) {
  auto g = LoadOnnx(path, {.fold_batchnorm = false});
  if (!g.ok()) return g.status();
  std::vector<model::TensorSpec> tensors;
  std::vector<const Initializer*> values;
  for (const auto& [name, init] : g->initializers) {  // name order
    const bool generated = name.rfind("onnx::", 0) == 0 || name.rfind('/', 0) == 0;
    if (init.is_int() || init.shape.empty() || generated) continue;
    model::TensorSpec t;
    t.name = name;
    t.shape.assign(init.shape.begin(), init.shape.end());
    tensors.push_back(std::move(t));
    values.push_back(&init);
  }
  if (tensors.empty()) {
    return InvalidArgument(path + ": the graph has no float initializer to train");
  }
  model::Model m{model::ModelSpec(std::move(tensors))};
  for (size_t i = 0; i < values.size(); ++i) {
    std::copy(values[i]->floats.begin(), values[i]->floats.end(), m.tensor(i).begin());
  }
  return m;
}

}  // namespace shoal::inference
