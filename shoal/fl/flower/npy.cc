#include "shoal/fl/flower/npy.h"

#include <charconv>
#include <cstring>

namespace shoal::flower {

namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);

std::string PyTupleShape(std::span<const uint64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ',';
  s += ')';
  return s;
}

}  // namespace

std::string JsonShape(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

std::string EncodeNpyF32(std::span<const uint64_t> shape, std::span<const float> values) {
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + PyTupleShape(shape) + ", }";
  // Padded with spaces and ended by '\n' so that magic + version + length + header is a
  // multiple of 64 bytes (numpy's alignment).
  const size_t fixed = kMagic.size() + 2 + 2;
  const size_t total = (fixed + header.size() + 1 + 63) / 64 * 64;
  header.append(total - fixed - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  const size_t at = out.size();
  out.resize(at + values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(out.data() + at, values.data(), values.size() * sizeof(float));
  return out;
}

Result<NpyView> ParseNpyF32(std::string_view b) {
  if (b.size() < 10 || b.substr(0, 6) != kMagic) return InvalidArgument("npy: no NUMPY magic");
  const auto major = static_cast<unsigned char>(b[6]);
  size_t hlen = 0, off = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) |
           (static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return InvalidArgument("npy: truncated header length");
    for (int i = 0; i < 4; ++i)
      hlen |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    off = 12;
  } else {
    return InvalidArgument("npy: format version " + std::to_string(major) + " not supported");
  }
  if (b.size() < off + hlen) return InvalidArgument("npy: truncated header");
  const std::string_view h = b.substr(off, hlen);
  auto field = [&](std::string_view key) -> std::string_view {
    const size_t k = h.find(key);
    if (k == std::string_view::npos) return {};
    size_t v = k + key.size();
    while (v < h.size() && (h[v] == ' ' || h[v] == ':')) ++v;
    return h.substr(v);
  };
  const std::string_view descr = field("'descr'");
  if (!descr.starts_with("'<f4'")) {
    return InvalidArgument("npy: dtype " + std::string(descr.substr(0, descr.find(','))) +
                           " (only float32, '<f4', is folded)");
  }
  if (!field("'fortran_order'").starts_with("False")) {
    return InvalidArgument("npy: fortran_order arrays are not supported");
  }
  std::string_view sh = field("'shape'");
  if (!sh.starts_with("(")) return InvalidArgument("npy: no shape");
  sh = sh.substr(1, sh.find(')') == std::string_view::npos ? 0 : sh.find(')') - 1);
  NpyView v;
  uint64_t numel = 1;
  while (!sh.empty()) {
    while (!sh.empty() && (sh.front() == ' ' || sh.front() == ',')) sh.remove_prefix(1);
    if (sh.empty()) break;
    uint64_t d = 0;
    auto [p, ec] = std::from_chars(sh.data(), sh.data() + sh.size(), d);
    if (ec != std::errc()) return InvalidArgument("npy: bad shape");
    v.shape.push_back(d);
    if (d != 0 && numel > (uint64_t{1} << 40) / d) return InvalidArgument("npy: shape too large");
    numel *= d;
    sh.remove_prefix(static_cast<size_t>(p - sh.data()));
  }
  v.data = b.substr(off + hlen);
  if (v.data.size() != numel * sizeof(float)) {
    return InvalidArgument("npy: " + std::to_string(v.data.size()) + " data bytes for " +
                           std::to_string(numel) + " float32 values");
  }
  return v;
}

}  // namespace shoal::flower
