// The layout of a payload buffer in the pool: a small head (what HTTP said about the body)
// followed, at a 64-byte aligned offset, by the body bytes. The gateway writes the head and
// receives the body straight behind it; handlers read both in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace shoal {

inline constexpr uint32_t kPayloadMagic = 0x4c504853;  // "SHPL"

struct PayloadHead {
  uint32_t magic;
  uint32_t body_offset;  // from the start of the buffer's data; a multiple of 64
  uint64_t body_length;
  uint16_t method;    // http_parser's enum http_method (requests)
  uint16_t status;    // HTTP status (responses)
  uint16_t path_len;  // strings follow the head: path, query, content type
  uint16_t query_len;
  uint16_t content_type_len;
  uint16_t reserved[3];
};
static_assert(sizeof(PayloadHead) == 32);

inline constexpr size_t AlignUp64(size_t n) { return (n + 63) & ~size_t{63}; }

// Bytes of buffer needed in front of the body for these strings.
inline size_t PayloadBodyOffset(size_t path_len, size_t query_len, size_t content_type_len) {
  return AlignUp64(sizeof(PayloadHead) + path_len + query_len + content_type_len);
}

// Writes the head into `buf` (which must hold at least PayloadBodyOffset(...) bytes).
inline void WritePayloadHead(std::span<std::byte> buf, uint16_t method, uint16_t status,
                             std::string_view path, std::string_view query,
                             std::string_view content_type, uint64_t body_length) {
  PayloadHead h{};
  h.magic = kPayloadMagic;
  h.body_offset =
      static_cast<uint32_t>(PayloadBodyOffset(path.size(), query.size(), content_type.size()));
  h.body_length = body_length;
  h.method = method;
  h.status = status;
  h.path_len = static_cast<uint16_t>(path.size());
  h.query_len = static_cast<uint16_t>(query.size());
  h.content_type_len = static_cast<uint16_t>(content_type.size());
  std::byte* p = buf.data();
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
  // An empty view may have a null data(), which memcpy must not get even for 0 bytes.
  if (!path.empty()) std::memcpy(p, path.data(), path.size());
  p += path.size();
  if (!query.empty()) std::memcpy(p, query.data(), query.size());
  p += query.size();
  if (!content_type.empty()) std::memcpy(p, content_type.data(), content_type.size());
}

// A checked view of a payload buffer. `valid` is false when the head is damaged or claims
// more bytes than the buffer holds (buffers come from other processes).
struct PayloadView {
  bool valid = false;
  uint16_t method = 0;
  uint16_t status = 0;
  std::string_view path, query, content_type;
  std::span<std::byte> body;
};

inline PayloadView ReadPayload(std::span<std::byte> buf) {
  PayloadView v;
  if (buf.size() < sizeof(PayloadHead)) return v;
  PayloadHead h;
  std::memcpy(&h, buf.data(), sizeof h);
  const size_t strings = size_t{h.path_len} + h.query_len + h.content_type_len;
  if (h.magic != kPayloadMagic || sizeof h + strings > h.body_offset ||
      h.body_offset > buf.size() || h.body_length > buf.size() - h.body_offset) {
    return v;
  }
  const char* s = reinterpret_cast<const char*>(buf.data()) + sizeof h;
  v.path = {s, h.path_len};
  v.query = {s + h.path_len, h.query_len};
  v.content_type = {s + h.path_len + h.query_len, h.content_type_len};
  v.method = h.method;
  v.status = h.status;
  v.body = buf.subspan(h.body_offset, h.body_length);
  v.valid = true;
  return v;
}

}  // namespace shoal
