// An enum's names as one table, read both ways: the name of a value (logs, printed config, JSON)
// and the value of a name (config files, flags, environment). A table per enum replaces a
// name switch plus a parse chain that had to be kept in step by hand.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shoal {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value`, or `fallback` when the table has no row for it.
template <typename E, size_t N>
constexpr const char* NameOf(const EnumName<E> (&table)[N], E value, const char* fallback) {
  for (const EnumName<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return fallback;
}

// The value named `name` (exact match), or nullopt.
template <typename E, size_t N>
constexpr std::optional<E> ValueOf(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& row : table) {
    if (name == row.name) return row.value;
  }
  return std::nullopt;
}

// "a, b or c": the names a value must be one of, in table order, for error messages.
template <typename E, size_t N>
std::string NameList(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

}  // namespace shoal
