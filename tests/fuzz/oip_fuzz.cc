// Fuzz target for the Open Inference Protocol request parser (shoal/serving/oip/oip.cc): every
// infer request body comes from a client. Whatever the bytes, parsing either fails with
// kInvalidArgument or yields exactly batch * per-sample values inside the scratch buffer, and
// the response writer then produces a header of the stated length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shoal/serving/oip/oip.h"
#include "tests/support/oip_for_test.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  static const oip::ModelInfo model = testing::OipModel("m", {2, 3}, {4}, 8);
  // The first byte, when present, chooses a binary-extension header length.
  std::optional<size_t> json_length;
  std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data), size);
  if (size > 0 && data[0] < 0x20) {
    json_length = data[0] * 7;
    body = body.subspan(1);
  }
  std::vector<float> scratch;
  oip::InferRequest request;
  // The fast path for the data array must agree with the general parser exactly.
  const testing::BothParses parsed =
      testing::ParseBothWays(body, json_length, model, scratch, &request);
  if (!parsed.disagreement.empty()) std::abort();
  const Status& st = parsed.status;
  if (!st.ok()) {
    if (st.code() != StatusCode::kInvalidArgument || st.message().empty()) std::abort();
    return 0;
  }
  if (request.batch < 1 || request.batch > model.max_batch) std::abort();
  if (request.input.size() != static_cast<size_t>(request.batch * model.input_elements())) {
    std::abort();
  }
  if (request.input.data() != scratch.data()) std::abort();
  std::vector<float> out(static_cast<size_t>(request.batch * model.output_elements()), 0.5f);
  std::string response;
  size_t header = 0;
  oip::WriteInferResponse(model, request, 3, out, response, &header);
  if (header > response.size() ||
      (request.binary_output && response.size() - header != out.size() * sizeof(float))) {
    std::abort();
  }
  return 0;
}
