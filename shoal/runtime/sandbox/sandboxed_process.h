// Starting an instance inside its sandbox: fork, then in the child (async-signal-safe calls
// only: raw syscalls on data prepared by the parent) lay out the descriptors, join the
// instance's cgroup, clear the supplementary groups, take the tenant's gid and uid, empty every
// capability set (bounding, permitted, effective, inheritable, ambient), set no_new_privs,
// install the precompiled seccomp filter and execve. Nothing of the instance, not even its
// dynamic loader, runs before all of that. A step that fails is reported back through a
// close-on-exec pipe, so a spawn that returns ok has exec'd.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/runtime/sandbox/cgroup.h"
#include "shoal/runtime/sandbox/seccomp_policy.h"
#include "shoal/runtime/sandbox/tenant_ids.h"
#include "shoal/runtime/sandbox/unique_fd.h"

namespace shoal {

struct SpawnOptions {
  std::string file;  // absolute path of the executable
  std::vector<std::string> argv;
  std::vector<std::string> env;
  // Child descriptor number <- parent descriptor. stdin, stdout and stderr, when not given,
  // are /dev/null; every other descriptor of the parent is closed in the child.
  std::vector<std::pair<int, int>> fds;
};

struct SandboxOptions {
  bool switch_ids = false;  // needs root (cap_setuid, cap_setgid, cap_setpcap)
  TenantId ids;
  const SeccompProgram* seccomp = nullptr;  // null: no filter
  const InstanceCgroup* cgroup = nullptr;   // null: stay in shoald's cgroup
};

// A started child: its pid and a pidfd (readable once it has exited; signals through it can
// never reach a recycled pid).
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  // 0 or -errno.
  int Signal(int sig) const;
  // Reaps the child if it has exited: true and its wait status in *status.
  bool TryReap(int* status);
  // For a process another one reaps (a zygote's child, whose wait status the zygote reports):
  // marks it reaped, so that it is never signalled again.
  void MarkReaped();

 private:
  pid_t pid_ = 0;
  UniqueFd pidfd_;
};

Result<ChildProcess> SpawnSandboxed(const SpawnOptions& spawn, const SandboxOptions& sandbox);

}  // namespace shoal
