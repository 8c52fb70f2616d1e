// Model tensors' element types on the wire and on disk: Shoal's one DType
// (shoal/common/dtype.h) and its scalar conversions (shoal/common/dtype_convert.h), the name
// parser for the types a model file or an update may hold, and the bulk conversions.
// Accumulation is always float32; the narrow types only exist to halve the bytes an update moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "shoal/common/dtype.h"
#include "shoal/common/dtype_convert.h"

namespace shoal::model {

using shoal::Bf16ToFloat;
using shoal::DType;
using shoal::DTypeName;
using shoal::DTypeSize;
using shoal::F16ToFloat;
using shoal::FloatToBf16;
using shoal::FloatToF16;

// "F32", "BF16" or "F16" (DTypeName's spelling): the floating types a model file, an update or
// a client's --dtype may name; nullopt for anything else (I64 included).
std::optional<DType> DTypeFromName(std::string_view name);

// An update's wire format by the name a job's spec.aggregation.wireFormats, a client's --dtype
// and the Python SDK use: "f32", "bf16", "f16", "int8" (kQ8), "int4" (kQ4), any case; nullopt
// otherwise. UpdateDTypeLabel is the reverse ("int8" for kQ8).
std::optional<DType> UpdateDTypeFromName(std::string_view name);
std::string_view UpdateDTypeLabel(DType d);
inline constexpr std::string_view kUpdateDTypeNames = "f32, bf16, f16, int8, int4";

// Writes n float32 values as `dst_dtype` (little-endian) at dst; dst needs no alignment. These
// take the floating and the block-quantized types (kQ8, kQ4: quantized per block, symmetric;
// dst holds TensorBytes(dst_dtype, n)); any other aborts naming it (a caller's bug).
void EncodeFloats(const float* src, size_t n, DType dst_dtype, std::byte* dst);
// Reads n little-endian values of `src_dtype` at src (no alignment needed) into float32.
void DecodeFloats(const std::byte* src, DType src_dtype, size_t n, float* dst);

// Counts the NaN/Inf values among n values of `dtype` at data (no alignment needed) and the
// index of the first one. One place for the scan so a vectorised version can replace it.
struct NonFinite {
  size_t count = 0;
  size_t first = 0;
};
NonFinite CountNonFinite(const std::byte* data, DType dtype, size_t n);

// The same for a block-quantized tensor's scales (shoal/common/dtype.h's ValidQuantScaleBits):
// how many blocks have an invalid one, the first such block, and its scale.
struct BadScales {
  size_t count = 0;
  size_t first_block = 0;
  float first_scale = 0;
};
BadScales CountBadScales(const std::byte* data, DType dtype, size_t n);

}  // namespace shoal::model
