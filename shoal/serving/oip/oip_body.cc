// The request body's encodings: gzip, deflate and raw deflate (Content-Encoding, inflated with
// a limit) and the binary tensor data extension's JSON length (Inference-Header-Content-Length).
#include <zlib.h>

#include <charconv>
#include <string>
#include <system_error>

#include "shoal/common/query_string.h"
#include "shoal/serving/oip/oip.h"

namespace shoal::oip {

namespace {

// Inflates `in` into `out` with zlib's `window_bits` (15 + 16: gzip, 15: zlib, -15: raw).
Status Inflate(std::span<const std::byte> in, int window_bits, size_t max_bytes,
               std::string_view coding, std::string& out) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return Internal("zlib: inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  // One byte over the limit tells a body that is exactly at it from one that is over.
  const size_t room = max_bytes + 1;
  out.resize(std::min(room, std::max<size_t>(4096, in.size() * 4)));
  size_t have = 0;
  int rc = Z_OK;
  while (rc == Z_OK && have <= max_bytes) {
    if (have == out.size()) out.resize(std::min(room, out.size() * 2));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    z.avail_out = static_cast<uInt>(out.size() - have);
    rc = inflate(&z, Z_NO_FLUSH);
    have = out.size() - z.avail_out;
    if (rc == Z_BUF_ERROR && z.avail_in > 0) rc = Z_OK;  // out of room: grow and go on
  }
  const std::string why = z.msg != nullptr ? z.msg : "truncated";
  inflateEnd(&z);
  if (have > max_bytes) {
    return InvalidArgument("Content-Encoding " + std::string(coding) +
                           ": the body inflates to more than " + std::to_string(max_bytes) +
                           " bytes");
  }
  if (rc != Z_STREAM_END) {
    return InvalidArgument("Content-Encoding " + std::string(coding) + ": the body is not " +
                           (window_bits > 15 ? "gzip" : "deflate") + " data (" + why + ")");
  }
  out.resize(have);
  return {};
}

}  // namespace

Result<std::optional<size_t>> BinaryHeaderLength(std::string_view query) {
  const auto v = RawQueryValue(query, "inference_header_content_length");
  if (!v) return std::optional<size_t>();
  size_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || p != v->data() + v->size()) {
    return InvalidArgument("Inference-Header-Content-Length must be a byte count, got '" +
                           std::string(*v) + "'");
  }
  return std::optional<size_t>(n);
}

Result<std::span<const std::byte>> DecodeBody(std::string_view query,
                                              std::span<const std::byte> body, size_t max_bytes,
                                              std::string& scratch) {
  const auto coding = RawQueryValue(query, "content_encoding");
  if (!coding || coding->empty() || *coding == "identity") return body;
  Status st;
  if (*coding == "gzip" || *coding == "x-gzip") {
    st = Inflate(body, 15 + 16, max_bytes, *coding, scratch);
  } else if (*coding == "deflate") {
    // HTTP's deflate is the zlib format (tritonclient's zlib.compress); some clients send the
    // raw stream, which zlib refuses at its first byte: tried next.
    st = Inflate(body, 15, max_bytes, *coding, scratch);
    if (!st.ok() && st.message().find("inflates to more") == std::string::npos) {
      st = Inflate(body, -15, max_bytes, *coding, scratch);
    }
  } else {
    return InvalidArgument("Content-Encoding '" + std::string(*coding) +
                           "' is not supported (gzip, deflate or none)");
  }
  if (!st.ok()) return st;
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(scratch.data()),
                                    scratch.size());
}

}  // namespace shoal::oip
