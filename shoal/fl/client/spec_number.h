// Parsing the client's spec strings ("dirichlet:0.5", "normal:0.05,0.02"): kind and argument,
// and the numbers in the argument.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace shoal::client::internal {

// "kind[:arg]" (has_arg: the colon is there), and the start of its error messages:
// `what "spec": `.
struct SpecParts {
  std::string_view kind, arg;
  bool has_arg;
  std::string where;
};
inline SpecParts SplitSpec(std::string_view spec, const char* what) {
  const auto colon = spec.find(':');
  const bool has_arg = colon != std::string_view::npos;
  return {spec.substr(0, colon), has_arg ? spec.substr(colon + 1) : "", has_arg,
          std::string(what) + " \"" + std::string(spec) + "\": "};
}

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
