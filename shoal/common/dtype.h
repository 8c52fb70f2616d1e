// The element type of a tensor, one enum for all of Shoal: model updates on the wire and on disk
// (shoal.v1.DType in proto/shoal/v1/fl.proto has the same values, mapped in
// shoal/fl/wire/update_format.cc), the aggregation fold's inputs, inference graphs' inputs and
// outputs. Accumulation is always float32; bf16/f16 halve the bytes an update moves; int64 only
// appears as an inference graph's declared input type (refused there). Header-only and free of
// dependencies: the fold kernels and the CUDA fold include it when they build alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

namespace shoal {

// kU32: secure aggregation's masked inputs (integers in Z_{2^32}, folded by wrapping adds).
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI64 = 3, kU32 = 4 };

// The floating types an update, a checkpoint or a fold carries.
inline constexpr bool IsFloatDType(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

inline constexpr size_t DTypeSize(DType d) {
  constexpr size_t kSizes[] = {4, 2, 2, 8, 4};
  const auto i = static_cast<size_t>(d);
  return i < std::size(kSizes) ? kSizes[i] : 0;
}

// "F32", "BF16", "F16", "I64", "U32": the safetensors spelling, also used in messages.
inline constexpr std::string_view DTypeName(DType d) {
  constexpr std::string_view kNames[] = {"F32", "BF16", "F16", "I64", "U32"};
  const auto i = static_cast<size_t>(d);
  return i < std::size(kNames) ? kNames[i] : "?";
}

}  // namespace shoal
