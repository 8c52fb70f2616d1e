// Cgroups for instances: each instance gets its own cgroup, <shoald's cgroup>/<parent>/<node>/
// <instance>, with the manifest's cpu and memory limits (and the node's pids limit), joined
// by the child before execve and removed when the instance has exited. Two implementations:
// cgroup v2 (cpu.max, memory.max, pids.max) and v1 (cpu.cfs_quota_us/cfs_period_us,
// memory.limit_in_bytes, pids.max, one directory per hierarchy); OpenCgroups picks one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/runtime/sandbox/unique_fd.h"

namespace shoal {

struct CgroupLimits {
  double cpu_cores = 0;       // 0 = no quota
  uint64_t memory_bytes = 0;  // 0 = no limit
  uint32_t pids_max = 0;      // 0 = no limit
};

// One instance's cgroup (a directory per hierarchy). Removed when destroyed, which the owner
// does after the process has been reaped.
class InstanceCgroup {
 public:
  InstanceCgroup(std::vector<std::string> dirs, std::vector<UniqueFd> procs);
  ~InstanceCgroup();
  InstanceCgroup(const InstanceCgroup&) = delete;
  InstanceCgroup& operator=(const InstanceCgroup&) = delete;

  // Open cgroup.procs files: a child writes "0" to each to move itself in (no allocation).
  const std::vector<UniqueFd>& procs() const { return procs_; }
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  std::vector<std::string> dirs_;
  std::vector<UniqueFd> procs_;
};

class CgroupHierarchy {
 public:
  virtual ~CgroupHierarchy() = default;
  // "v1 (cpu, memory, pids) at /sys/fs/cgroup/cpu/shoal/node, ..." for the start-up log.
  virtual std::string Describe() const = 0;
  virtual const char* version() const = 0;
  // Creates <node dir>/<name> with `limits` applied.
  virtual Result<std::unique_ptr<InstanceCgroup>> Create(const std::string& name,
                                                         const CgroupLimits& limits) = 0;
};

// The hierarchy `mode` asks for (auto: v2 when its cpu and memory controllers can be enabled
// below shoald's cgroup, else v1 when its cpu and memory hierarchies are mounted and
// writable). Creates <parent>/<node> and removes instance cgroups a previous shoald left.
// An error says why none can be used; shoald logs it and runs instances without cgroups.
Result<std::unique_ptr<CgroupHierarchy>> OpenCgroups(CgroupMode mode, const std::string& parent,
                                                     const std::string& node);

namespace cgroup_detail {
// Where a hierarchy is mounted and which cgroup of it this process is in.
struct Mount {
  std::string mount_point;
  std::string own_dir;  // mount_point + this process's cgroup path
};
// v1: the hierarchy holding `controller`; v2: controller "" (the unified mount).
Result<Mount> FindMount(const std::string& controller);
Status WriteFile(const std::string& path, const std::string& value);
// Removes the empty cgroup directories below `dir` (instances a killed shoald left), deepest
// first; keeps `dir`.
void RemoveChildren(const std::string& dir);
std::unique_ptr<CgroupHierarchy> MakeV1(std::vector<std::pair<std::string, std::string>> dirs);
Result<std::unique_ptr<CgroupHierarchy>> MakeV2(const std::string& own, const std::string& rel);
}  // namespace cgroup_detail

}  // namespace shoal
