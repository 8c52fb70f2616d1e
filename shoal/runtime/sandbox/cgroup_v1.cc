// cgroup v1: one directory per hierarchy (cpu, memory, pids), each joined separately.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>

#include "shoal/runtime/sandbox/cgroup.h"

namespace shoal {
namespace {

constexpr uint64_t kCfsPeriodUs = 100000;  // the kernel's default period
constexpr uint64_t kMinCfsQuotaUs = 1000;  // the kernel refuses less

class CgroupV1 final : public CgroupHierarchy {
 public:
  explicit CgroupV1(std::vector<std::pair<std::string, std::string>> dirs)
      : dirs_(std::move(dirs)) {}
  ~CgroupV1() override {
    for (const auto& [c, d] : dirs_) rmdir(d.c_str());  // the node's, once its instances are gone
  }

  std::string Describe() const override {
    std::string out = "v1 (";
    for (size_t i = 0; i < dirs_.size(); ++i) out += (i ? ", " : "") + dirs_[i].first;
    out += ") at";
    for (const auto& [c, d] : dirs_) out += " " + d;
    return out;
  }
  const char* version() const override { return "v1"; }

  Result<std::unique_ptr<InstanceCgroup>> Create(const std::string& name,
                                                 const CgroupLimits& limits) override {
    using cgroup_detail::WriteFile;
    std::vector<std::string> made;
    std::vector<UniqueFd> procs;
    auto fail = [&](Status st) -> Result<std::unique_ptr<InstanceCgroup>> {
      procs.clear();
      for (const auto& d : made) rmdir(d.c_str());
      return st;
    };
    for (const auto& [controller, node_dir] : dirs_) {
      // Without a CPU limit the instance stays in shoald's cpu group: a group of its own would
      // weigh as one task against every thread outside it (cpu.shares 1024 each), so all the
      // instances together would get one task's CPU time (bench-invoke: 0.45 x nginx with the
      // group, 0.58 without, as before the sandbox).
      if (controller == "cpu" && limits.cpu_cores <= 0) continue;
      const std::string dir = node_dir + "/" + name;
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return fail(ErrnoStatus("mkdir " + dir, errno));
      }
      made.push_back(dir);
      Status st;
      if (controller == "cpu" && limits.cpu_cores > 0) {
        const auto quota = std::max<uint64_t>(
            kMinCfsQuotaUs, static_cast<uint64_t>(std::llround(limits.cpu_cores * kCfsPeriodUs)));
        st = WriteFile(dir + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs));
        if (st.ok()) st = WriteFile(dir + "/cpu.cfs_quota_us", std::to_string(quota));
      } else if (controller == "memory" && limits.memory_bytes > 0) {
        st = WriteFile(dir + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes));
        // With swap accounting on, the same bound on memory + swap (else swap is an escape).
        if (st.ok() && access((dir + "/memory.memsw.limit_in_bytes").c_str(), W_OK) == 0) {
          st = WriteFile(dir + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes));
        }
      } else if (controller == "pids" && limits.pids_max > 0) {
        st = WriteFile(dir + "/pids.max", std::to_string(limits.pids_max));
      }
      if (!st.ok()) return fail(st);
      UniqueFd fd(open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd.valid()) return fail(ErrnoStatus("open " + dir + "/cgroup.procs", errno));
      procs.push_back(std::move(fd));
    }
    return std::make_unique<InstanceCgroup>(std::move(made), std::move(procs));
  }

 private:
  std::vector<std::pair<std::string, std::string>> dirs_;
};

}  // namespace

namespace cgroup_detail {
std::unique_ptr<CgroupHierarchy> MakeV1(std::vector<std::pair<std::string, std::string>> dirs) {
  return std::make_unique<CgroupV1>(std::move(dirs));
}
}  // namespace cgroup_detail

}  // namespace shoal
