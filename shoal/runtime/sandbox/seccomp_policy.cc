#include "shoal/runtime/sandbox/seccomp_policy.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace shoal {
namespace {

constexpr uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                     CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME;

}  // namespace

const std::vector<std::string>& DeniedSyscalls() {
  static const std::vector<std::string> kDenied = {
      // Other processes' memory and execution.
      "ptrace",
      "process_vm_readv",
      "process_vm_writev",
      "kcmp",
      "pidfd_getfd",
      // Filesystems, mounts and namespaces (the escape kit).
      "mount",
      "umount2",
      "pivot_root",
      "chroot",
      "move_mount",
      "open_tree",
      "fsopen",
      "fsconfig",
      "fsmount",
      "fspick",
      "mount_setattr",
      "unshare",
      "setns",
      "open_by_handle_at",
      "name_to_handle_at",
      "quotactl",
      "quotactl_fd",
      // The kernel itself.
      "kexec_load",
      "kexec_file_load",
      "init_module",
      "finit_module",
      "delete_module",
      "bpf",
      "perf_event_open",
      "userfaultfd",
      "iopl",
      "ioperm",
      "syslog",
      "acct",
      "lookup_dcookie",
      "uselib",
      "vhangup",
      "swapon",
      "swapoff",
      "reboot",
      "fanotify_init",
      // Keyrings.
      "keyctl",
      "add_key",
      "request_key",
      // io_uring runs its operations outside this filter.
      "io_uring_setup",
      "io_uring_enter",
      "io_uring_register",
      // The node's clock and names.
      "settimeofday",
      "clock_settime",
      "clock_adjtime",
      "adjtimex",
      "sethostname",
      "setdomainname",
  };
  return kDenied;
}

bool IsKnownSyscall(const std::string& name) {
  return seccomp_syscall_resolve_name(name.c_str()) != __NR_SCMP_ERROR;
}

std::string SyscallName(int nr) {
  char* n = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
  if (n == nullptr) return {};
  std::string out(n);
  free(n);  // NOLINT(cppcoreguidelines-no-malloc): libseccomp allocates it with malloc
  return out;
}

SeccompProgram::SeccompProgram(SeccompProgram&& o) noexcept : filter_(std::move(o.filter_)) {
  prog_.len = static_cast<unsigned short>(filter_.size());
  prog_.filter = filter_.data();
}

SeccompProgram& SeccompProgram::operator=(SeccompProgram&& o) noexcept {
  filter_ = std::move(o.filter_);
  prog_.len = static_cast<unsigned short>(filter_.size());
  prog_.filter = filter_.data();
  return *this;
}

Result<SeccompProgram> SeccompProgram::Compile(const std::vector<std::string>& allow) {
  for (const auto& name : allow) {
    if (!IsKnownSyscall(name)) return InvalidArgument("unknown syscall '" + name + "'");
  }
  auto allowed = [&](const std::string& n) {
    return std::find(allow.begin(), allow.end(), n) != allow.end();
  };
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW),
                                                       seccomp_release);
  if (!ctx) return Internal("seccomp_init failed");
  // A syscall made through another architecture's ABI (int 0x80 on x86-64) kills too.
  seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0);  // the child sets no_new_privs itself
  for (const auto& name : DeniedSyscalls()) {
    if (allowed(name)) continue;
#if defined(__SANITIZE_ADDRESS__)
    // The sanitizer build only: LeakSanitizer stops the process's threads with ptrace at exit.
    if (name == "ptrace") continue;
#endif
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_KILL_PROCESS, nr, 0); rc < 0) {
      return Internal("seccomp rule for " + name + ": " + std::strerror(-rc));
    }
  }
  if (!allowed("unshare") && !allowed("clone")) {
    // clone creating a namespace is unshare by another name; one rule per flag (the filter
    // compares a masked argument against one value).
    for (uint64_t bit = 1; bit != 0 && bit <= kNamespaceFlags; bit <<= 1) {
      if ((kNamespaceFlags & bit) == 0) continue;
      int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1,
                                SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit));
      if (rc < 0) return Internal(std::string("seccomp rule for clone: ") + std::strerror(-rc));
    }
    if (!allowed("clone3")) {
      int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
      if (rc < 0) return Internal(std::string("seccomp rule for clone3: ") + std::strerror(-rc));
    }
  }
  // Export to a memfd and read the program back (seccomp_export_bpf_mem is libseccomp 2.6).
  const int fd = memfd_create("shoal-seccomp", MFD_CLOEXEC);
  if (fd < 0) return ErrnoStatus("memfd_create", errno);
  if (int rc = seccomp_export_bpf(ctx.get(), fd); rc < 0) {
    close(fd);
    return Internal(std::string("seccomp_export_bpf: ") + std::strerror(-rc));
  }
  const off_t bytes = lseek(fd, 0, SEEK_END);
  SeccompProgram p;
  p.filter_.resize(static_cast<size_t>(bytes) / sizeof(sock_filter));
  const ssize_t n = pread(fd, p.filter_.data(), p.filter_.size() * sizeof(sock_filter), 0);
  close(fd);
  if (n != static_cast<ssize_t>(p.filter_.size() * sizeof(sock_filter)) || p.filter_.empty()) {
    return Internal("seccomp: reading the exported filter back failed");
  }
  p.prog_.len = static_cast<unsigned short>(p.filter_.size());
  p.prog_.filter = p.filter_.data();
  return p;
}

}  // namespace shoal
