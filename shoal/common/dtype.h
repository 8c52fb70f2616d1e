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
// kQ8, kQ4: block-quantized updates (spec.aggregation.wireFormats int8, int4): blocks of
// kQuantBlock values, each block its float32 scale then its signed integers; the layout is
// below (QuantBlockBytes) and in docs/reference/update-format.md.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI64 = 3, kU32 = 4, kQ8 = 5, kQ4 = 6 };

// The floating types an update, a checkpoint or a fold carries.
inline constexpr bool IsFloatDType(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

// The block-quantized types: each value is float(q) * scale, one float32 multiplication
// (rounded to nearest even), q a signed 8-bit (kQ8) or 4-bit (kQ4) integer of its block.
inline constexpr bool IsQuantizedDType(DType d) { return d == DType::kQ8 || d == DType::kQ4; }
// The types an update's tensors may hold and a leaf folds into a float32 sum.
inline constexpr bool IsFoldableDType(DType d) { return IsFloatDType(d) || IsQuantizedDType(d); }

// Bytes per element of the fixed-width types; 0 for the quantized ones (TensorBytes).
inline constexpr size_t DTypeSize(DType d) {
  constexpr size_t kSizes[] = {4, 2, 2, 8, 4, 0, 0};
  const auto i = static_cast<size_t>(d);
  return i < std::size(kSizes) ? kSizes[i] : 0;
}

// Quantized layout: a tensor of n values is ceil(n / kQuantBlock) blocks, in order, each
//   [0, 4)  its scale, float32 little-endian: finite, >= +0 and <= kMaxQuantScale (so that
//           every value of the block is finite); the bits of -0, NaN, Inf or larger are refused
//   [4, .)  its m values (m = kQuantBlock, or what is left for the last block): kQ8 one
//           two's-complement byte each; kQ4 a two's-complement nibble each, two per byte, the
//           even element in the low nibble, the last byte's high nibble 0 when m is odd.
// No padding between blocks: block b starts at TensorBytes(d, b * kQuantBlock).
inline constexpr size_t kQuantBlock = 64;
inline constexpr float kMaxQuantScale = 3.40282347e38f / 128;  // FLT_MAX / 128, exact
inline constexpr uint32_t kMaxQuantScaleBits = 0x7bffffffu;    // its bits
// A scale is valid when its bits, read as an unsigned integer, are at most kMaxQuantScaleBits:
// this excludes a set sign bit (-0 and negatives), NaN, Inf and anything over kMaxQuantScale.
inline constexpr bool ValidQuantScaleBits(uint32_t bits) { return bits <= kMaxQuantScaleBits; }
// The bytes of one block of m values (1 <= m <= kQuantBlock).
inline constexpr size_t QuantBlockBytes(DType d, size_t m) {
  return 4 + (d == DType::kQ8 ? m : (m + 1) / 2);
}

// Bytes of n values of type d; for the quantized types the block layout above.
inline constexpr uint64_t TensorBytes(DType d, uint64_t n) {
  if (!IsQuantizedDType(d)) return n * DTypeSize(d);
  const uint64_t full = n / kQuantBlock, rest = n % kQuantBlock;
  return full * QuantBlockBytes(d, kQuantBlock) + (rest ? QuantBlockBytes(d, rest) : 0);
}
// Where element i starts; for the quantized types i must start a block (a multiple of
// kQuantBlock): the offset of that block.
inline constexpr uint64_t ElementOffset(DType d, uint64_t i) { return TensorBytes(d, i); }

// "F32", "BF16", "F16", "I64", "U32", "Q8", "Q4": the safetensors spelling (Q8 and Q4 are
// Shoal's), also used in messages.
inline constexpr std::string_view DTypeName(DType d) {
  constexpr std::string_view kNames[] = {"F32", "BF16", "F16", "I64", "U32", "Q8", "Q4"};
  const auto i = static_cast<size_t>(d);
  return i < std::size(kNames) ? kNames[i] : "?";
}

}  // namespace shoal
