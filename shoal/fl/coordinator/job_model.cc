// An FL job's tensors (JobModelSpec): the built-in architecture's, spec.model.lora's adapter
// tensors, or spec.model.onnx's float initializers where shoald has the ONNX reader.
#include "shoal/fl/coordinator/job_state.h"
#include "shoal/fl/lora/lora_spec.h"

#ifdef SHOAL_FL_ONNX
#include "shoal/serving/onnxmodel/onnx_model.h"
#endif

namespace shoal::coordinator_internal {

Result<model::ModelSpec> JobModelSpec(const FlJobSpec& s, std::vector<float>* initial) {
  if (s.lora.enabled()) return lora::AdapterSpec(s.lora.base, s.lora.rank, s.lora.targets);
  if (s.onnx_model.empty()) {
    auto spec = model::ArchitectureSpec(s.architecture, JobArchitecture(s));
    if (!spec.ok()) return InvalidArgument("spec.model.architecture: " + spec.status().message());
    return spec;
  }
#ifdef SHOAL_FL_ONNX
  auto m = inference::OnnxModel(s.onnx_model);
  if (!m.ok()) return InvalidArgument("spec.model.onnx: " + m.status().message());
  if (initial != nullptr) *initial = std::move(m->values);
  return m->spec;
#else
  (void)initial;
  return InvalidArgument("spec.model.onnx: this shoald was built without the ONNX reader");
#endif
}

}  // namespace shoal::coordinator_internal
