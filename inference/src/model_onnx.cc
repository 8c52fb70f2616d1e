#include "shoal/inference/model_onnx.h"

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "shoal/inference/model_graph.h"
#include "shoal/inference/onnx.h"
#include "shoal/model/architectures.h"
#include "shoal/model/safetensors.h"

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

Result<std::string> JobModelAsOnnx(std::string_view job_status_json, std::string_view safetensors) {
  const json st = json::parse(job_status_json, nullptr, false);
  const json m = st.is_object() ? st.value("model", json::object()) : json::object();
  if (!m.is_object() || !m.contains("architecture") || !m["architecture"].is_string()) {
    return InvalidArgument(
        "its status names no model architecture (a shoald older than the "
        "ONNX export?)");
  }
  const std::string arch = m["architecture"].get<std::string>();
  model::ArchitectureOptions options;
  options.hidden = {Width(m, "hidden", options.hidden.at(0))};
  options.inputs = Width(m, "inputs", options.inputs);
  options.classes = Width(m, "classes", options.classes);
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
