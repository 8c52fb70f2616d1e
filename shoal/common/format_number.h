// One double in a printf format ("%g", "%.0f", "%.17g", "%gs"): what messages and text records
// use where a number is printed the C way, instead of each keeping its own buffer.
#pragma once

#include <cstdio>
#include <string>

namespace shoal {

// `format` takes exactly one double. The buffer holds any double in any such format ("%.0f" of
// the largest is 309 digits), so nothing is cut.
__attribute__((format(printf, 1, 0))) inline std::string FormatNumber(const char* format,
                                                                      double v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace shoal
