// The project's Python, which every benchmark's anchor script runs under: $SHOAL_PYTHON when
// set, else the venv scripts/lib.sh made beside the build folder this binary was built into
// (<root>/<build>/bin/bench-x -> <root>/.venv/bin/python), else Debian's /usr/bin/python3.
// Found at run time, not baked into the binary, so a build tree moved with its clone still works.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace shoal::bench {

inline std::string ProjectPython() {
  if (const char* e = std::getenv("SHOAL_PYTHON"); e != nullptr && *e != '\0') return e;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path venv = exe.parent_path().parent_path().parent_path() / ".venv";
    const std::filesystem::path py = venv / "bin" / "python";
    if (access(py.c_str(), X_OK) == 0) return py.string();
  }
  return "/usr/bin/python3";
}

}  // namespace shoal::bench
