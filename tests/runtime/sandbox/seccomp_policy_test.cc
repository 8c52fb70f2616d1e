#include "shoal/runtime/sandbox/seccomp_policy.h"

#include <gtest/gtest.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

namespace shoal {
namespace {

int SyscallNumber(const std::string& name) {
  for (int nr = 0; nr < 512; ++nr) {
    if (SyscallName(nr) == name) return nr;
  }
  return -1;
}

// Runs `body` in a child under `prog`; returns its wait status. The body's return value is
// the child's exit code.
int RunFiltered(const SeccompProgram& prog, const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(100);
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog.prog()) != 0) _exit(101);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(SeccompPolicyTest, DeniedSyscallKillsTheProcess) {
  auto prog = SeccompProgram::Compile({});
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_GT(prog->size(), 50u);
  const int st = RunFiltered(*prog, [] { return unshare(CLONE_NEWUSER) == 0 ? 0 : 3; });
  ASSERT_TRUE(WIFSIGNALED(st)) << "exit " << WEXITSTATUS(st);
  EXPECT_EQ(WTERMSIG(st), SIGSYS);
  // A namespace through clone is unshare by another name.
  const int c = RunFiltered(*prog, [] {
    return syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, nullptr, nullptr, nullptr, 0) >= 0 ? 0 : 3;
  });
  ASSERT_TRUE(WIFSIGNALED(c));
  EXPECT_EQ(WTERMSIG(c), SIGSYS);
  for (const char* name : {"keyctl", "bpf", "mount"}) {
    const int nr = SyscallNumber(name);
    ASSERT_GE(nr, 0) << name;
    const int k = RunFiltered(*prog, [nr] { return syscall(nr, 0, 0, 0, 0, 0) >= 0 ? 0 : 3; });
    ASSERT_TRUE(WIFSIGNALED(k)) << name;
    EXPECT_EQ(WTERMSIG(k), SIGSYS) << name;
  }
}

TEST(SeccompPolicyTest, OrdinaryWorkIsAllowed) {
  auto prog = SeccompProgram::Compile({});
  ASSERT_TRUE(prog.ok());
  const int st = RunFiltered(*prog, [] {
    // Threads (clone3 answers ENOSYS, libc falls back to clone), fork, files, time.
    if (syscall(SYS_clone3, nullptr, 0) != -1 || errno != ENOSYS) return 4;
    const pid_t p = fork();
    if (p == 0) _exit(7);
    int s = 0;
    waitpid(p, &s, 0);
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 7) return 5;
    return getpid() > 0 && access("/proc/self/status", R_OK) == 0 ? 0 : 6;
  });
  ASSERT_TRUE(WIFEXITED(st)) << "signal " << WTERMSIG(st);
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(SeccompPolicyTest, AllowListLetsAFunctionBack) {
  auto prog = SeccompProgram::Compile({"unshare", "keyctl"});
  ASSERT_TRUE(prog.ok());
  // Not killed: the kernel's own answer (0, or EPERM/EINVAL where user namespaces are off).
  const int st = RunFiltered(*prog, [] {
    unshare(CLONE_NEWUSER);
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st)) << "signal " << WTERMSIG(st);
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(SeccompPolicyTest, UnknownNamesAreRefused) {
  auto prog = SeccompProgram::Compile({"unshare", "not_a_syscall"});
  ASSERT_FALSE(prog.ok());
  EXPECT_EQ(prog.status().message(), "unknown syscall 'not_a_syscall'");
  EXPECT_TRUE(IsKnownSyscall("ptrace"));
  EXPECT_FALSE(IsKnownSyscall("ptrace2"));
  EXPECT_EQ(SyscallName(SYS_unshare), "unshare");
  const auto& denied = DeniedSyscalls();
  for (const char* n : {"ptrace",
                        "mount",
                        "umount2",
                        "pivot_root",
                        "chroot",
                        "kexec_load",
                        "init_module",
                        "finit_module",
                        "delete_module",
                        "bpf",
                        "perf_event_open",
                        "keyctl",
                        "add_key",
                        "request_key",
                        "unshare",
                        "setns",
                        "swapon",
                        "swapoff",
                        "reboot",
                        "process_vm_readv",
                        "process_vm_writev",
                        "userfaultfd",
                        "open_by_handle_at",
                        "acct",
                        "settimeofday",
                        "clock_settime",
                        "io_uring_setup"}) {
    EXPECT_NE(std::find(denied.begin(), denied.end(), n), denied.end()) << n;
  }
}

}  // namespace
}  // namespace shoal
