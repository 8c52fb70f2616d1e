// Helpers shared by the sandbox tests (unit and integration): files, /proc status fields,
// root-owned temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "shoal/common/file_io.h"
#include "tests/support/temp_dir.h"

namespace shoal::testing {

inline std::string ReadAll(const std::string& path) { return ReadFileBytes(path).value_or(""); }

// The value of "Key:" in a /proc/PID/status text ("" when absent), whitespace collapsed.
inline std::string StatusField(const std::string& status, const std::string& key) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream v(line.substr(key.size() + 1));
    std::string out, w;
    while (v >> w) out += (out.empty() ? "" : " ") + w;
    return out;
  }
  return "";
}

inline void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

}  // namespace shoal::testing
