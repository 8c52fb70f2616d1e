// The 8-byte prefix every model update body starts with (update_format.h has the whole layout):
// the magic "SHU1" and the little-endian u32 length of the header after it. The one place it is
// parsed: ParseUpdate, the gateway (before it takes any pool memory for an update whose top is
// on another node) and the coordinator (an update's head, a member's admission request) all call
// ParsePrefix. Header-only, so the data plane reads it without linking the wire format's
// protobuf code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "shoal/common/status.h"

namespace shoal::model {

inline constexpr char kUpdateMagic[4] = {'S', 'H', 'U', '1'};
inline constexpr uint64_t kUpdatePrefixBytes = 8;  // magic + header length
inline constexpr uint32_t kMaxUpdateHeaderBytes = 1 << 20;
inline constexpr uint64_t kUpdateAlignment = 64;

inline constexpr uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
// Offset of the tensor area in a body whose header is `header_len` bytes (the tensor table is
// in the header: once this many bytes have arrived, the update's structure can be checked).
inline constexpr uint64_t TensorAreaOffset(uint64_t header_len) {
  return AlignUp(kUpdatePrefixBytes + header_len, kUpdateAlignment);
}

// The header's length, from the first bytes of a body of `body_bytes` bytes (`prefix` may hold
// fewer than the body, e.g. only what has arrived, but at least the prefix unless the body is
// shorter). Refused, with the message a client sees in its 400: a body shorter than the prefix,
// another magic, a header over `max_header_bytes`, a header running past the body.
inline Result<uint32_t> ParsePrefix(std::span<const std::byte> prefix, uint64_t body_bytes,
                                    uint32_t max_header_bytes = kMaxUpdateHeaderBytes) {
  if (body_bytes < kUpdatePrefixBytes || prefix.size() < kUpdatePrefixBytes) {
    return InvalidArgument("update body truncated: " + std::to_string(body_bytes) +
                           " bytes, shorter than the 8-byte prefix");
  }
  if (std::memcmp(prefix.data(), kUpdateMagic, 4) != 0) {
    return InvalidArgument("bad magic: an update body starts with \"SHU1\"");
  }
  uint32_t hlen;
  std::memcpy(&hlen, prefix.data() + 4, 4);
  if (hlen > max_header_bytes) {
    return InvalidArgument("header length " + std::to_string(hlen) + " exceeds the limit " +
                           std::to_string(max_header_bytes));
  }
  if (kUpdatePrefixBytes + hlen > body_bytes) {
    return InvalidArgument("header length " + std::to_string(hlen) +
                           " runs past the end of the body (" + std::to_string(body_bytes) +
                           " bytes)");
  }
  return hlen;
}

}  // namespace shoal::model
