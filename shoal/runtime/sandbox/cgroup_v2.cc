// cgroup v2: one directory in the unified hierarchy; controllers enabled down the path.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shoal/runtime/sandbox/cgroup.h"

namespace shoal {
namespace {

constexpr uint64_t kCpuPeriodUs = 100000;
constexpr uint64_t kMinCpuQuotaUs = 1000;

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Whether the space-separated `list` names `controller`.
bool Lists(const std::string& list, const std::string& controller) {
  std::stringstream ss(list);
  std::string c;
  while (ss >> c) {
    if (c == controller) return true;
  }
  return false;
}

class CgroupV2 final : public CgroupHierarchy {
 public:
  CgroupV2(std::string dir, bool pids) : dir_(std::move(dir)), pids_(pids) {}
  ~CgroupV2() override { rmdir(dir_.c_str()); }
  std::string Describe() const override {
    return "v2 (cpu, memory" + std::string(pids_ ? ", pids" : "") + ") at " + dir_;
  }
  const char* version() const override { return "v2"; }

  Result<std::unique_ptr<InstanceCgroup>> Create(const std::string& name,
                                                 const CgroupLimits& limits) override {
    using cgroup_detail::WriteFile;
    const std::string dir = dir_ + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dir, errno);
    Status st;
    if (limits.cpu_cores > 0) {
      const auto quota = std::max<uint64_t>(
          kMinCpuQuotaUs, static_cast<uint64_t>(std::llround(limits.cpu_cores * kCpuPeriodUs)));
      st = WriteFile(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(kCpuPeriodUs));
    }
    if (st.ok() && limits.memory_bytes > 0) {
      st = WriteFile(dir + "/memory.max", std::to_string(limits.memory_bytes));
      if (st.ok() && access((dir + "/memory.swap.max").c_str(), W_OK) == 0) {
        st = WriteFile(dir + "/memory.swap.max", "0");
      }
    }
    if (st.ok() && pids_ && limits.pids_max > 0) {
      st = WriteFile(dir + "/pids.max", std::to_string(limits.pids_max));
    }
    UniqueFd fd;
    if (st.ok()) {
      fd.Reset(open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd.valid()) st = ErrnoStatus("open " + dir + "/cgroup.procs", errno);
    }
    if (!st.ok()) {
      rmdir(dir.c_str());
      return st;
    }
    std::vector<UniqueFd> procs;
    procs.push_back(std::move(fd));
    return std::make_unique<InstanceCgroup>(std::vector<std::string>{dir}, std::move(procs));
  }

 private:
  std::string dir_;
  bool pids_;
};

}  // namespace

namespace cgroup_detail {

Result<std::unique_ptr<CgroupHierarchy>> MakeV2(const std::string& own, const std::string& rel) {
  const std::string available = ReadLine(own + "/cgroup.controllers");
  for (const std::string c : {"cpu", "memory"}) {
    if (!Lists(available, c)) {
      return Unavailable("controller " + c + " is not available in " + own +
                         " (cgroup.controllers: '" + available + "')");
    }
  }
  const bool pids = Lists(available, "pids");
  const std::string enable = pids ? "+cpu +memory +pids" : "+cpu +memory";
  // Enable the controllers in shoald's cgroup and every level down to the node's directory
  // (a cgroup with processes of its own cannot: then v2 is not usable here).
  std::string dir = own;
  std::stringstream parts(rel);
  std::string part;
  if (Status st = WriteFile(dir + "/cgroup.subtree_control", enable); !st.ok()) return st;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    dir += "/" + part;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dir, errno);
    if (Status st = WriteFile(dir + "/cgroup.subtree_control", enable); !st.ok()) return st;
  }
  RemoveChildren(dir);
  return std::unique_ptr<CgroupHierarchy>(new CgroupV2(dir, pids));
}

}  // namespace cgroup_detail
}  // namespace shoal
