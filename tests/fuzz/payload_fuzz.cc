// Fuzz target for the payload head reader (ReadPayload, shoal/common/payload.h):
// the head of a pool buffer is written by another process, so every field is untrusted. Whatever
// the bytes, a valid view must lie inside the buffer; the input's last bytes also drive a
// write-then-read round trip that must give back what was written.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "shoal/common/payload.h"

namespace {

bool Inside(const void* p, size_t n, const std::byte* begin, const std::byte* end) {
  const auto* b = static_cast<const std::byte*>(p);
  return n == 0 || (b >= begin && b <= end && n <= static_cast<size_t>(end - b));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  // A heap copy of exactly `size` bytes, so ASan sees any read past the buffer's end.
  std::vector<std::byte> buf(size);
  if (size > 0) std::memcpy(buf.data(), data, size);
  const std::span<std::byte> span(buf.data(), buf.size());
  const PayloadView v = ReadPayload(span);
  if (v.valid) {
    const std::byte* b = buf.data();
    const std::byte* e = b + buf.size();
    if (!Inside(v.path.data(), v.path.size(), b, e) ||
        !Inside(v.query.data(), v.query.size(), b, e) ||
        !Inside(v.content_type.data(), v.content_type.size(), b, e) ||
        !Inside(v.body.data(), v.body.size(), b, e)) {
      std::abort();
    }
    unsigned sum = 0;  // touch every byte the view exposes
    for (char c : v.path) sum += static_cast<unsigned char>(c);
    for (char c : v.query) sum += static_cast<unsigned char>(c);
    for (char c : v.content_type) sum += static_cast<unsigned char>(c);
    for (std::byte c : v.body) sum += static_cast<unsigned>(c);
    if (sum == 0xdeadbeef) return 1;
  }

  // Round trip: the first bytes choose string lengths, the rest is their text and the body.
  if (size < 8) return 0;
  const size_t path_len = data[0] % 64, query_len = data[1] % 64, ct_len = data[2] % 64;
  const uint16_t method = static_cast<uint16_t>(data[3] | data[4] << 8);
  const uint16_t status = static_cast<uint16_t>(data[5] | data[6] << 8);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 7, size - 7);
  // Empty strings as default-constructed views too (data() == nullptr), as callers pass them.
  const bool null_empty = (data[0] & 0x80) != 0;
  auto piece = [&](size_t from, size_t len) {
    const std::string_view v = rest.substr(std::min(from, rest.size()), len);
    return v.empty() && null_empty ? std::string_view() : v;
  };
  const std::string_view path = piece(0, path_len);
  const std::string_view query = piece(path.size(), query_len);
  const std::string_view ct = piece(path.size() + query.size(), ct_len);
  const std::string_view body = rest.substr(path.size() + query.size() + ct.size());
  const size_t off = PayloadBodyOffset(path.size(), query.size(), ct.size());
  if (off % 64 != 0 || off < sizeof(PayloadHead) + path.size() + query.size() + ct.size()) {
    std::abort();
  }
  std::vector<std::byte> out(off + body.size());
  WritePayloadHead(out, method, status, path, query, ct, body.size());
  if (!body.empty()) std::memcpy(out.data() + off, body.data(), body.size());
  const PayloadView w = ReadPayload(out);
  if (!w.valid || w.method != method || w.status != status || w.path != path || w.query != query ||
      w.content_type != ct || w.body.size() != body.size() ||
      (!body.empty() && std::memcmp(w.body.data(), body.data(), body.size()) != 0)) {
    std::abort();
  }
  // One byte short of the body: the reader must refuse it.
  if (!body.empty() && ReadPayload(std::span<std::byte>(out.data(), out.size() - 1)).valid) {
    std::abort();
  }
  return 0;
}
