// Running an anchor's script (a peer system's, or the project's Python client) from a bench:
// its command line logged on stderr under the bench's name, its stdout captured, and the JSON
// record it prints last parsed.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "project_python.h"

namespace shoal::bench {

// The project's Python with the SDK (shoal/fl/sdk/python) importable.
inline std::string SdkPython() {
  return "PYTHONPATH=" SHOAL_SOURCE_DIR "/shoal/fl/sdk/python " + ProjectPython();
}

// `cmd`'s stdout's last non-empty line parsed as JSON; null when it printed none (or could not
// start), a discarded value when that line is not JSON.
inline nlohmann::json RunJson(const char* bench, const std::string& cmd) {
  std::fprintf(stderr, "%s: %s\n", bench, cmd.c_str());
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return nullptr;
  std::string out;
  char buf[65536];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  const auto end = out.find_last_not_of('\n');
  if (end == std::string::npos) return nullptr;
  const auto start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1),
                               nullptr, false);
}

}  // namespace shoal::bench
