// The safetensors format (Hugging Face): how Shoal hands out global models and takes an initial
// model. Layout: u64 little-endian N, N bytes of JSON header {"name": {"dtype", "shape",
// "data_offsets": [begin, end)}, "__metadata__": {string: string}}, then the data; offsets are
// relative to the start of the data and the tensors cover it exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/wire/dtype.h"
#include "shoal/fl/wire/model_spec.h"

namespace shoal::model {

// __metadata__ keys Shoal writes.
inline constexpr std::string_view kMetadataJob = "shoal.job";
inline constexpr std::string_view kMetadataVersion = "shoal.version";

// A tensor to write: `data` holds product(shape) values of `dtype`, little-endian.
struct SafetensorsEntry {
  std::string_view name;
  DType dtype = DType::kF32;
  std::span<const uint64_t> shape;
  std::span<const std::byte> data;
};

// Writes the tensors in the given order, the header padded with spaces to a multiple of 8 so
// the data is 8-byte aligned. kInvalidArgument for a duplicate or empty name, the name
// "__metadata__", or data whose size does not match shape and dtype.
Result<std::vector<std::byte>> WriteSafetensors(
    std::span<const SafetensorsEntry> tensors,
    const std::map<std::string, std::string>& metadata = {});
// The same bytes in a std::string (what the HTTP layer sends): no copy from a vector.
Result<std::string> WriteSafetensorsString(std::span<const SafetensorsEntry> tensors,
                                           const std::map<std::string, std::string>& metadata = {});
// The same file written into `out` without the tensors' bytes: `out` resized to the whole file
// and its header written; returns where the data starts. The caller copies each tensor's bytes
// there, one after the other in the order given (e.g. split across threads), for the same bytes.
// A string reused commit after commit keeps its pages (no allocation, no page faults, no zero
// fill when the size is unchanged). On error `out` is left as it was.
Result<size_t> WriteSafetensorsHeaderInto(std::span<const SafetensorsEntry> tensors,
                                          const std::map<std::string, std::string>& metadata,
                                          std::string* out);

// A tensor of a file read by ReadSafetensors; `data` points into the file's bytes.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;
};

struct SafetensorsView {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensor> tensors;  // in data order
  const SafetensorsTensor* Find(std::string_view name) const;
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100 << 20;  // the reference implementation's limit
};

// Validates `file` and returns views into it (no copy). Errors are kInvalidArgument naming the
// tensor or field. Supports F32, BF16 and F16 tensors.
Result<SafetensorsView> ReadSafetensors(std::span<const std::byte> file,
                                        const SafetensorsLimits& limits = {});

// The model's tensors in spec order as `dtype`, with "format": "pt" added to the metadata so
// PyTorch tooling loads it.
std::vector<std::byte> ModelToSafetensors(const Model& model,
                                          const std::map<std::string, std::string>& metadata = {},
                                          DType dtype = DType::kF32);
// Reads a model that must match `spec` exactly (names and shapes; any supported dtype,
// converted to float32).
Result<Model> ModelFromSafetensors(std::span<const std::byte> file, const ModelSpec& spec);
// Reads a model whose spec is the file's tensors in data order (an uploaded initial model).
Result<Model> ModelFromSafetensors(std::span<const std::byte> file);

}  // namespace shoal::model
