// The instances' seccomp filter: every syscall is allowed except the ones no handler needs
// and that reach the kernel's most exposed or most privileged surfaces (debugging other
// processes, mounts and namespaces, kernel modules, BPF, perf, keyrings, io_uring, clocks,
// reboot...). A denied call kills the whole process (SECCOMP_RET_KILL_PROCESS, SIGSYS).
// A Function may allow some of them back (spec.security.seccomp.allow). The filter is compiled
// in shoald (libseccomp) into a BPF program that the child installs before execve.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

// The denied syscalls, by name (README "Instance sandbox" lists them with the reasons).
const std::vector<std::string>& DeniedSyscalls();

// True when `name` is a syscall of this architecture (libseccomp knows it).
bool IsKnownSyscall(const std::string& name);

// The syscall's name for its number on this architecture ("" when unknown).
std::string SyscallName(int nr);

// A compiled filter, ready for seccomp(SECCOMP_SET_MODE_FILTER) in a child that may not
// allocate: prog() points into this object.
class SeccompProgram {
 public:
  const sock_fprog* prog() const { return &prog_; }
  size_t size() const { return filter_.size(); }

  // The denied list minus `allow` (names; unknown ones are an error naming them). Arguments
  // are filtered too: clone with a CLONE_NEW* flag is denied like unshare, and clone3 (whose
  // flags sit in memory a filter cannot read) fails with ENOSYS so that libc falls back to clone.
  static Result<SeccompProgram> Compile(const std::vector<std::string>& allow);

  SeccompProgram(SeccompProgram&& o) noexcept;
  SeccompProgram& operator=(SeccompProgram&& o) noexcept;
  SeccompProgram(const SeccompProgram&) = delete;

 private:
  SeccompProgram() = default;
  std::vector<sock_filter> filter_;
  sock_fprog prog_{};
};

}  // namespace shoal
