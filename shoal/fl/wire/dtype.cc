#include "shoal/fl/wire/dtype.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shoal/fl/kernels/fold.h"

namespace shoal::model {

static_assert(std::endian::native == std::endian::little, "wire formats are little-endian");

std::optional<DType> DTypeFromName(std::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (name == DTypeName(d)) return d;
  }
  return std::nullopt;
}

std::optional<DType> UpdateDTypeFromName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8, DType::kQ4}) {
    if (lower == UpdateDTypeLabel(d)) return d;
  }
  return std::nullopt;
}

std::string_view UpdateDTypeLabel(DType d) {
  switch (d) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kQ8:
      return "int8";
    case DType::kQ4:
      return "int4";
    case DType::kI64:
    case DType::kU32:
      break;
  }
  return DTypeName(d);
}

BadScales CountBadScales(const std::byte* data, DType dtype, size_t n) {
  BadScales r;
  const std::byte* p = data;
  for (size_t i = 0, b = 0; i < n; i += kQuantBlock, ++b) {
    const size_t m = std::min(kQuantBlock, n - i);
    uint32_t bits;
    std::memcpy(&bits, p, 4);
    if (!ValidQuantScaleBits(bits) && r.count++ == 0) {
      r.first_block = b;
      r.first_scale = std::bit_cast<float>(bits);
    }
    p += QuantBlockBytes(dtype, m);
  }
  return r;
}

namespace {

[[noreturn]] void NotAFloatType(const char* what, DType d) {
  std::fprintf(stderr, "shoal_model: %s: element type %s is not a floating type\n", what,
               DTypeName(d).data());
  std::abort();
}

// A floating type's bulk conversions from and to float32: F32's a copy, the 16-bit types' a loop
// over their scalar conversions (dtype_convert.h), inlined.
struct F32Codec {
  static void Encode(const float* src, size_t n, std::byte* dst) {
    std::memcpy(dst, src, n * sizeof(float));
  }
  static void Decode(const std::byte* src, size_t n, float* dst) {
    std::memcpy(dst, src, n * sizeof(float));
  }
};

template <uint16_t (*To)(float), float (*From)(uint16_t)>
struct Codec16 {
  static void Encode(const float* src, size_t n, std::byte* dst) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = To(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
  static void Decode(const std::byte* src, size_t n, float* dst) {
    uint16_t h;
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = From(h);
    }
  }
};

// Calls f with the codec of the floating type d (the one place a type meets its conversions);
// any other type aborts naming `what`.
template <typename F>
void WithCodec(const char* what, DType d, F f) {
  switch (d) {
    case DType::kF32:
      return f(F32Codec{});
    case DType::kBF16:
      return f(Codec16<FloatToBf16, Bf16ToFloat>{});
    case DType::kF16:
      return f(Codec16<FloatToF16, F16ToFloat>{});
    case DType::kI64:
    case DType::kU32:
    case DType::kQ8:
    case DType::kQ4:
      break;
  }
  NotAFloatType(what, d);
}

}  // namespace

void EncodeFloats(const float* src, size_t n, DType dst_dtype, std::byte* dst) {
  if (IsQuantizedDType(dst_dtype)) return aggregator::ConvertFromF32(dst, src, dst_dtype, n);
  WithCodec("EncodeFloats", dst_dtype, [&](auto codec) { codec.Encode(src, n, dst); });
}

void DecodeFloats(const std::byte* src, DType src_dtype, size_t n, float* dst) {
  if (IsQuantizedDType(src_dtype)) return aggregator::ConvertToF32(dst, src, src_dtype, n);
  WithCodec("DecodeFloats", src_dtype, [&](auto codec) { codec.Decode(src, n, dst); });
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
