// Which syscall the seccomp filter killed an instance for: the kernel writes an audit record
// (type=1326, "syscall=N") for every SECCOMP_RET_KILL_PROCESS; shoald reads it back from the
// kernel log when an instance dies of SIGSYS.
#pragma once

#include <sys/types.h>

#include <string>

namespace shoal {

// "unshare (272)" from the latest seccomp record of `pid` in /dev/kmsg, or "" when the log
// cannot be read or holds none (no audit to the kernel log, rate-limited, another namespace).
std::string SeccompKillSyscall(pid_t pid);

}  // namespace shoal
