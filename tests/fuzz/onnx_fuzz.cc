// libFuzzer target for the ONNX reader (shoal/serving/onnx/onnx.h): a model file
// is outside input (deployed by users). Every input must load, or be refused with
// kInvalidArgument; a loaded graph must infer shapes for another batch and serialize again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "shoal/serving/onnx/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::inference;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto g = LoadOnnxBytes(bytes);
  if (!g.ok()) {
    if (g.status().code() != shoal::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (!g->InferShapes(3).ok()) std::abort();  // Validate passed at batch 1 and 2
  if (!SerializeOnnx(*g).ok()) std::abort();
  return 0;
}
