// The process's environment as the built-in handlers read their settings (SHOAL_* variables
// that shoald writes from the manifest): unset and empty are the same.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace shoal {

// $name, or `fallback` when it is unset or empty.
inline std::string EnvString(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// $name read as an unsigned decimal (strtoull: what does not parse is 0), or `fallback` when it
// is unset or empty.
inline uint64_t EnvUint(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace shoal
