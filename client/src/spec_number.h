// Number parsing for the client's spec strings ("dirichlet:0.5", "normal:0.05,0.02").
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace shoal::client::internal {

inline std::optional<double> ParseDouble(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

inline std::optional<long long> ParseInt(std::string_view s) {
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace shoal::client::internal
