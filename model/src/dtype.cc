#include "shoal/model/dtype.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shoal::model {

static_assert(std::endian::native == std::endian::little, "wire formats are little-endian");

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  return std::nullopt;
}

namespace {

[[noreturn]] void NotAFloatType(const char* what, DType d) {
  std::fprintf(stderr, "shoal_model: %s: element type %s is not a floating type\n", what,
               DTypeName(d).data());
  std::abort();
}

}  // namespace

void EncodeFloats(const float* src, size_t n, DType dst_dtype, std::byte* dst) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kI64:
      break;
  }
  NotAFloatType("EncodeFloats", dst_dtype);
}

void DecodeFloats(const std::byte* src, DType src_dtype, size_t n, float* dst) {
  uint16_t h;
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = F16ToFloat(h);
      }
      return;
    case DType::kI64:
      break;
  }
  NotAFloatType("DecodeFloats", src_dtype);
}

NonFinite CountNonFinite(const std::byte* data, DType dtype, size_t n) {
  if (!IsFloatDType(dtype)) NotAFloatType("CountNonFinite", dtype);
  // A value is non-finite when its exponent bits are all ones.
  NonFinite r;
  auto note = [&r](size_t i) {
    if (r.count++ == 0) r.first = i;
  };
  if (dtype == DType::kF32) {
    uint32_t u;
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&u, data + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) note(i);
    }
    return r;
  }
  const uint16_t mask = dtype == DType::kBF16 ? 0x7f80u : 0x7c00u;
  uint16_t h;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&h, data + 2 * i, 2);
    if ((h & mask) == mask) note(i);
  }
  return r;
}

}  // namespace shoal::model
