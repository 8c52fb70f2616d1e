// Freezing an instance's processes for inspection: the compromise detector's quarantine keeps a
// suspicious instance stopped but alive (its memory, files and sockets as they were) until the
// function goes away. cgroup v2 freezes the instance's own cgroup (cgroup.freeze); v1 moves its
// processes into a directory of the freezer hierarchy (freezer.state FROZEN), since instance
// cgroups have no freezer directory of their own.
#pragma once

#include <memory>
#include <string>

#include "shoal/common/status.h"
#include "shoal/runtime/sandbox/cgroup.h"

namespace shoal {

class FrozenCgroup {
 public:
  // Freezes every process of `cg` (`version`: "v1" or "v2", CgroupHierarchy::version()), named
  // `name` in the v1 freezer hierarchy. Returns once the kernel reports it frozen (or an error
  // after a second).
  static Result<std::unique_ptr<FrozenCgroup>> Freeze(const InstanceCgroup& cg,
                                                      const std::string& version,
                                                      const std::string& name);
  FrozenCgroup(const FrozenCgroup&) = delete;
  FrozenCgroup& operator=(const FrozenCgroup&) = delete;
  // Thaws (if still frozen) and removes the v1 freezer directory once its processes are gone.
  ~FrozenCgroup();

  // Lets the processes run again (before killing them: a frozen v1 task does not die).
  Status Thaw();
  // The directory whose state file says FROZEN, for the log and for inspection.
  const std::string& dir() const { return dir_; }

 private:
  FrozenCgroup(std::string dir, bool v2) : dir_(std::move(dir)), v2_(v2) {}
  std::string dir_;
  bool v2_;
  bool frozen_ = true;
};

}  // namespace shoal
