#include "shoal/serving/export/model_onnx.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/serving/model/model_graph.h"
#include "shoal/serving/onnx/onnx.h"
#include "shoal/serving/onnxmodel/onnx_model.h"

namespace shoal::inference {
namespace {

// spec.model.onnx: the job's own file (the one shoald reads) as it is, its float initializers
// holding the version's tensors of the same names; its opset, nodes and constants unchanged.
Result<std::string> OnnxJobModel(const std::string& path, std::string_view safetensors) {
  auto job_model = OnnxModel(path);
  if (!job_model.ok()) return job_model.status();
  const auto bytes = std::as_bytes(std::span(safetensors.data(), safetensors.size()));
  auto weights = model::ModelFromSafetensors(bytes, job_model->spec);
  if (!weights.ok()) {
    return InvalidArgument("the model does not fit the graph of " + path + ": " +
                           weights.status().message());
  }
  return OnnxFileWithWeights(path, WeightsOf(*weights));
}

}  // namespace

Result<std::string> JobModelAsOnnx(std::string_view job_status_json, std::string_view safetensors) {
  auto job = JobArchitectureFromStatus(job_status_json);
  if (!job.ok()) {
    return InvalidArgument(job.status().message() + " (a shoald older than the ONNX export?)");
  }
  if (!job->onnx.empty()) return OnnxJobModel(job->onnx, safetensors);
  const std::string& arch = job->name;
  const model::ArchitectureOptions& options = job->options;
  auto spec = model::ArchitectureSpec(arch, options);
  const auto bytes = std::as_bytes(std::span(safetensors.data(), safetensors.size()));
  auto weights =
      spec.ok() ? model::ModelFromSafetensors(bytes, *spec) : Result<model::Model>(spec.status());
  if (!weights.ok()) {
    return InvalidArgument("the model does not fit architecture '" + arch +
                           "': " + weights.status().message());
  }
  auto graph = GraphFromArchitecture(arch, options, *weights);
  Result<std::string> onnx =
      graph.ok() ? SerializeOnnx(*graph) : Result<std::string>(graph.status());
  if (!onnx.ok()) {
    return InvalidArgument("cannot build the ONNX graph of '" + arch +
                           "': " + onnx.status().message());
  }
  return std::move(*onnx);
}

}  // namespace shoal::inference
