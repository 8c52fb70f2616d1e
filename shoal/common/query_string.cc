#include "shoal/common/query_string.h"

#include <charconv>

namespace shoal {

std::optional<std::string_view> RawQueryValue(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != key) continue;
    return eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
  }
  return std::nullopt;
}

std::optional<std::string> QueryValue(std::string_view query, std::string_view key) {
  const std::optional<std::string_view> raw = RawQueryValue(query, key);
  if (!raw) return std::nullopt;
  const std::string_view v = *raw;
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    unsigned value = 0;
    if (v[i] == '%' && i + 2 < v.size() &&
        std::from_chars(v.data() + i + 1, v.data() + i + 3, value, 16).ptr == v.data() + i + 3) {
      out += static_cast<char>(value);
      i += 2;
    } else {
      out += v[i];
    }
  }
  return out;
}

bool QueryUint(std::string_view query, std::string_view key, uint64_t* out) {
  const std::optional<std::string_view> v = RawQueryValue(query, key);
  if (!v) return true;
  uint64_t value = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
  if (ec != std::errc() || p != v->data() + v->size() || v->empty()) return false;
  *out = value;
  return true;
}

}  // namespace shoal
