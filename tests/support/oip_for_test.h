// The Open Inference Protocol codec's unit tests and its fuzz target share a small model and
// one check: the request parser's fast path for the data array agrees exactly with the
// general parser. No gtest here: the fuzz target aborts where a test reports.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shoal/serving/oip/oip.h"

namespace shoal::testing {

// A model `name` reading "input" of per-sample shape `input_shape` and writing "logits" of
// `output_shape`, at most `max_batch` rows a request.
inline oip::ModelInfo OipModel(std::string name, std::vector<int64_t> input_shape,
                               std::vector<int64_t> output_shape, int64_t max_batch) {
  oip::ModelInfo m;
  m.name = std::move(name);
  m.input_name = "input";
  m.input_shape = std::move(input_shape);
  m.output_name = "logits";
  m.output_shape = std::move(output_shape);
  m.max_batch = max_batch;
  return m;
}

struct BothParses {
  Status status;             // the fast path's
  std::string disagreement;  // how the general parser's answer differs; "" when it does not
};

// Parses `body` with the fast path into `out` (its values in `scratch`) and again with the
// general parser: both must refuse it with the same message, or both read the same id, batch,
// binary_output and input bytes.
inline BothParses ParseBothWays(std::span<const std::byte> body, std::optional<size_t> json_length,
                                const oip::ModelInfo& model, std::vector<float>& scratch,
                                oip::InferRequest* out) {
  BothParses r{oip::ParseInferRequest(body, json_length, model, scratch, out), ""};
  std::vector<float> general_scratch;
  oip::InferRequest general;
  const Status gst =
      oip::ParseInferRequestGeneral(body, json_length, model, general_scratch, &general);
  if (r.status.ok() != gst.ok() || r.status.message() != gst.message()) {
    r.disagreement = "fast: " + r.status.ToString() + "; general: " + gst.ToString();
  } else if (r.status.ok()) {
    if (out->id != general.id) r.disagreement += "id " + out->id + " vs " + general.id + "; ";
    if (out->batch != general.batch) {
      r.disagreement +=
          "batch " + std::to_string(out->batch) + " vs " + std::to_string(general.batch) + "; ";
    }
    if (out->binary_output != general.binary_output) r.disagreement += "binary_output; ";
    if (out->input.size() != general.input.size() ||
        (!out->input.empty() &&
         std::memcmp(out->input.data(), general.input.data(), out->input.size_bytes()) != 0)) {
      r.disagreement += "input values";
    }
  }
  return r;
}

}  // namespace shoal::testing
