// Element types of model tensors on the wire and on disk (float32, bfloat16, float16), and the
// scalar conversions between them. Accumulation is always float32; the narrow types only
// exist to halve the bytes an update moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shoal::model {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline constexpr size_t DTypeSize(DType d) { return d == DType::kF32 ? 4 : 2; }
// "F32", "BF16", "F16": the safetensors spelling, also used in error messages.
std::string_view DTypeName(DType d);
std::optional<DType> DTypeFromName(std::string_view name);

// Round-to-nearest-even conversions; NaN stays NaN, overflow goes to infinity.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

// Writes n float32 values as `dst_dtype` (little-endian) at dst; dst needs no alignment.
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

}  // namespace shoal::model
