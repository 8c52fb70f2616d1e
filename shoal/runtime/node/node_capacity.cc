#include "shoal/runtime/node/node_capacity.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "shoal/common/format_number.h"

namespace shoal {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double MemTotalMb(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream fields(line.substr(9));
      double kb = 0;
      fields >> kb;
      return kb / 1024.0;
    }
  }
  // No /proc: ask the C library.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) / kMiB : 0;
}

uint32_t NvidiaDevices(const std::string& dev_dir) {
  uint32_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0) {
      bool digits = true;
      for (size_t i = 6; i < name.size(); ++i) digits = digits && std::isdigit(name[i]);
      if (digits) ++n;
    }
  }
  return n;
}

}  // namespace

Resources ProbeNodeCapacity(double cores_override, const std::string& meminfo_path,
                            const std::string& dev_dir) {
  Resources r;
  r.cores = cores_override > 0
                ? cores_override
                : static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  r.memory_mb = MemTotalMb(meminfo_path);
  r.gpus = NvidiaDevices(dev_dir);
  return r;
}

Resources SpecResources(const FunctionSpec& spec) {
  Resources r;
  r.cores = spec.cpu > 0 ? spec.cpu : 0;
  r.memory_mb = static_cast<double>(spec.memory_bytes) / kMiB;
  r.gpus = spec.gpu;
  return r;
}

std::string ShortResource(const NodeState& node, const Resources& request) {
  const Resources free = node.Free();
  if (request.gpus > free.gpus) {
    return "needs " + std::to_string(request.gpus) + " GPU(s), node " + node.name + " has " +
           std::to_string(free.gpus) + " of " + std::to_string(node.capacity.gpus) + " GPU(s) free";
  }
  if (request.memory_mb > free.memory_mb + 1e-9) {
    return "needs " + FormatNumber("%.0f", request.memory_mb) + " MiB of memory, node " +
           node.name + " has " + FormatNumber("%.0f", free.memory_mb) + " of " +
           FormatNumber("%.0f", node.capacity.memory_mb) + " MiB free";
  }
  if (request.cores > free.cores + 1e-9) {
    return "needs " + FormatNumber("%g", request.cores) + " CPU cores, node " + node.name +
           " has " + FormatNumber("%g", free.cores) + " of " +
           FormatNumber("%g", node.capacity.cores) + " cores free";
  }
  return "";
}

}  // namespace shoal
