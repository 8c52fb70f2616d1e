// The environment an FL job's leaf aggregator instance is started with: the coordinator writes
// these into the leaf FunctionSpec's handler env, the leaf (shoal/fl/leaf/fl_leaf_handler.cc)
// reads them. The names are written here once.
#pragma once

#include <string>
#include <vector>

namespace shoal::fl_leaf_env {

inline constexpr const char* kArchitecture = "SHOAL_FL_ARCH";  // the model's architecture
inline constexpr const char* kHidden = "SHOAL_FL_HIDDEN";      // its hidden width
inline constexpr const char* kInputs = "SHOAL_FL_INPUTS";      // input features (64 for digits)
inline constexpr const char* kOnnx = "SHOAL_FL_ONNX";  // spec.model.onnx: the model's ONNX file
// spec.model.lora: the base model's d_model and n_layer ("192,4", read by the coordinator from
// the base file: the leaf need not see it), the job's rank, the targets (comma-separated) and
// spec.aggregation.lora.method (hetlora: the leaf takes and zero-pads lower-rank adapters).
inline constexpr const char* kLoraShape = "SHOAL_FL_LORA_SHAPE";
inline constexpr const char* kLoraRank = "SHOAL_FL_LORA_RANK";
inline constexpr const char* kLoraTargets = "SHOAL_FL_LORA_TARGETS";
inline constexpr const char* kLoraMethod = "SHOAL_FL_LORA_METHOD";
// spec.aggregation.device: auto | cpu | gpu.
inline constexpr const char* kAggregationDevice = "SHOAL_FL_AGG_DEVICE";
// sum (fold into the partial sum) | none (validate only: a robust job's leaves).
inline constexpr const char* kFold = "SHOAL_FL_FOLD";
// spec.aggregation.wireFormats, comma-separated: f32,bf16,f16 (the default), int8, int4.
inline constexpr const char* kWireFormats = "SHOAL_FL_WIRE_FORMATS";
inline std::string WireFormatsValue(const std::vector<std::string>& formats) {
  std::string s;
  for (const std::string& f : formats) s += (s.empty() ? "" : ",") + f;
  return s;
}

}  // namespace shoal::fl_leaf_env
