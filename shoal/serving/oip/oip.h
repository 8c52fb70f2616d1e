// The Open Inference Protocol v2 (KServe / Triton) as the inference handler speaks it: parsing
// an infer request (JSON tensors, flat or nested, and the binary-data extension) against the
// one input a model has, and writing the infer response and the model metadata. Every error a
// client can cause is kInvalidArgument with a message naming what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::oip {

// What requests are checked against: the served model's single input and output, float32,
// shapes per sample (the batch dimension, -1 in metadata, is not included).
struct ModelInfo {
  std::string name;
  std::string platform = "shoal";
  std::string input_name = "input";
  std::vector<int64_t> input_shape;
  std::string output_name = "output";
  std::vector<int64_t> output_shape;
  int64_t max_batch = 32;

  int64_t input_elements() const;   // per sample
  int64_t output_elements() const;  // per sample
};

struct InferRequest {
  std::string id;                // echoed in the response ("" when the request had none)
  int64_t batch = 0;             // rows (the first dimension of the input's shape)
  std::vector<int64_t> shape;    // the input's shape as the request gave it
  std::span<const float> input;  // batch * input_elements() values (in the caller's scratch)
  bool binary_output = false;    // answer the output with the binary-data extension
};

// The request header's value of Inference-Header-Content-Length (the gateway passes it in the
// query as `inference_header_content_length=N`); nullopt when the body is JSON only.
Result<std::optional<size_t>> BinaryHeaderLength(std::string_view query);

// The request body as the handler parses it: a Content-Encoding of gzip or deflate (the gateway
// passes the header in the query as `content_encoding=gzip`; tritonclient's
// request_compression_algorithm sends either) is inflated into `scratch`, at most `max_bytes`,
// and the span points there; none or identity gives `body` itself. Any other coding, a corrupt
// stream or one inflating past `max_bytes` is kInvalidArgument naming it.
Result<std::span<const std::byte>> DecodeBody(std::string_view query,
                                              std::span<const std::byte> body, size_t max_bytes,
                                              std::string& scratch);

// Parses `body` (its first `json_length` bytes are the JSON header when the binary extension is
// used, else all of it) into `out`; input values land in `scratch`, which is reused between
// requests so that steady state allocates nothing for them.
Status ParseInferRequest(std::span<const std::byte> body, std::optional<size_t> json_length,
                         const ModelInfo& model, std::vector<float>& scratch, InferRequest* out);

// The same without the fast path for the input's data array (tests and the fuzz target check
// that both agree).
Status ParseInferRequestGeneral(std::span<const std::byte> body, std::optional<size_t> json_length,
                                const ModelInfo& model, std::vector<float>& scratch,
                                InferRequest* out);

// Writes the response to `out` (cleared first): JSON, or with `request.binary_output` the JSON
// header followed by the output's little-endian float32 bytes; `*json_length` is then the
// header's size (for Inference-Header-Content-Length), else out.size().
void WriteInferResponse(const ModelInfo& model, const InferRequest& request, uint64_t version,
                        std::span<const float> output, std::string& out, size_t* json_length);

// GET /v2/models/{name}: name, versions (the one served), platform, inputs and outputs with
// shapes (-1 for the batch dimension) and datatypes.
std::string ModelMetadataJson(const ModelInfo& model, uint64_t version);

// {"error": "..."}
std::string ErrorJson(std::string_view message);

// "[-1,784]"
std::string ShapeText(std::span<const int64_t> shape);

}  // namespace shoal::oip
