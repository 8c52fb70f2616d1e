#include "shoal/runtime/sandbox/sandboxed_process.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shoal {
namespace {

// What the child reports when a step fails (then exits 127).
enum ChildStep : int {
  kStepSignals = 1,
  kStepFds,
  kStepCgroup,
  kStepAmbient,
  kStepBounding,
  kStepGroups,
  kStepGid,
  kStepUid,
  kStepStillRoot,
  kStepCapset,
  kStepNoNewPrivs,
  kStepSeccomp,
  kStepExec,
  kStepDeathSig,
};

const char* StepName(int step) {
  switch (step) {
    case kStepSignals:
      return "resetting signals";
    case kStepFds:
      return "setting up descriptors";
    case kStepCgroup:
      return "joining the instance cgroup";
    case kStepAmbient:
      return "clearing ambient capabilities";
    case kStepBounding:
      return "emptying the capability bounding set";
    case kStepGroups:
      return "clearing supplementary groups";
    case kStepGid:
      return "setresgid";
    case kStepUid:
      return "setresuid";
    case kStepStillRoot:
      return "checking the uid change";
    case kStepCapset:
      return "clearing capabilities";
    case kStepNoNewPrivs:
      return "setting no_new_privs";
    case kStepSeccomp:
      return "installing the seccomp filter";
    case kStepExec:
      return "execve";
    case kStepDeathSig:
      return "setting the parent-death signal";
  }
  return "?";
}

struct ChildError {
  int step;
  int err;
};

[[noreturn]] void Fail(int pipe_fd, int step) {
  ChildError e{step, errno};
  (void)!write(pipe_fd, &e, sizeof e);
  _exit(127);
}

// The child's side. Only raw syscalls and async-signal-safe libc calls; no allocation.
[[noreturn]] void RunChild(int err_fd, int devnull, const char* file, char* const* argv,
                           char* const* envp, const std::pair<int, int>* fds, size_t nfds,
                           int high_fd, const SandboxOptions& sb) {
  // Signals: default dispositions (shoald ignores SIGPIPE; that would be inherited) and an
  // empty mask (the parent blocked everything around fork).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    sigaction(s, &dfl, nullptr);  // EINVAL for the real-time signals libc reserves: fine
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, nullptr) != 0) Fail(err_fd, kStepSignals);

  // The cgroup first, while its descriptors are certainly where the parent left them.
  if (sb.cgroup != nullptr) {
    for (const auto& fd : sb.cgroup->procs()) {
      if (write(fd.get(), "0", 1) != 1) Fail(err_fd, kStepCgroup);
    }
  }

  // Descriptors: the error pipe, /dev/null and every source first above every target (so that
  // no source is overwritten), then into place.
  if (const int e = fcntl(err_fd, F_DUPFD_CLOEXEC, high_fd); e >= 0) err_fd = e;
  devnull = fcntl(devnull, F_DUPFD_CLOEXEC, high_fd);
  if (devnull < 0) Fail(err_fd, kStepFds);
  int moved[16];
  if (nfds > 16) Fail(err_fd, kStepFds);
  for (size_t i = 0; i < nfds; ++i) {
    moved[i] = fcntl(fds[i].second, F_DUPFD_CLOEXEC, high_fd);
    if (moved[i] < 0) Fail(err_fd, kStepFds);
  }
  bool given[3] = {false, false, false};
  for (size_t i = 0; i < nfds; ++i) {
    if (dup2(moved[i], fds[i].first) < 0) Fail(err_fd, kStepFds);
    if (fds[i].first < 3) given[fds[i].first] = true;
  }
  for (int std_fd = 0; std_fd < 3; ++std_fd) {
    if (!given[std_fd] && dup2(devnull, std_fd) < 0) Fail(err_fd, kStepFds);
  }
  for (int fd = 3; fd < high_fd; ++fd) {
    bool target = false;
    for (size_t i = 0; i < nfds; ++i) target = target || fds[i].first == fd;
    if (!target) close(fd);
  }
  // Everything else closes at exec (the error pipe stays usable until then).
  if (syscall(SYS_close_range, high_fd, ~0U, CLOSE_RANGE_CLOEXEC) != 0) Fail(err_fd, kStepFds);

  if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 &&
      errno != EINVAL) {
    Fail(err_fd, kStepAmbient);
  }
  for (int c = 0; c < 64; ++c) {
    if (syscall(SYS_prctl, PR_CAPBSET_DROP, c, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the last capability
      if (sb.switch_ids) Fail(err_fd, kStepBounding);
      break;  // not root: cannot, and there is nothing in it to fear beyond what we hold
    }
  }
  if (sb.switch_ids) {
    // Raw syscalls: they change this task only (libc's wrappers would signal other threads,
    // and the child has none).
    if (syscall(SYS_setgroups, 0, nullptr) != 0) Fail(err_fd, kStepGroups);
    if (syscall(SYS_setresgid, sb.ids.gid, sb.ids.gid, sb.ids.gid) != 0) Fail(err_fd, kStepGid);
    if (syscall(SYS_setresuid, sb.ids.uid, sb.ids.uid, sb.ids.uid) != 0) Fail(err_fd, kStepUid);
    if (syscall(SYS_getuid) == 0 || syscall(SYS_geteuid) == 0) {
      errno = EPERM;
      Fail(err_fd, kStepStillRoot);
    }
  }
  // The uid change empties permitted and effective, not inheritable: clear all three.
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &hdr, data) != 0) Fail(err_fd, kStepCapset);
  // The credential change cleared the parent-death signal; shoal-fn sets its own, this one
  // covers the time until it does.
  if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) Fail(err_fd, kStepDeathSig);
  if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(err_fd, kStepNoNewPrivs);
  if (sb.seccomp != nullptr &&
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, sb.seccomp->prog()) != 0) {
    Fail(err_fd, kStepSeccomp);
  }
  execve(file, argv, envp);
  Fail(err_fd, kStepExec);
}

}  // namespace

int ChildProcess::Signal(int sig) const {
  if (!pidfd_.valid()) return -ESRCH;
  return syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) == 0 ? 0 : -errno;
}

bool ChildProcess::TryReap(int* status) {
  if (pid_ <= 0) return false;
  const pid_t r = waitpid(pid_, status, WNOHANG);
  if (r == pid_) {
    pid_ = -pid_;  // reaped: never signalled again
    pidfd_.Reset();
    return true;
  }
  return false;
}

void ChildProcess::MarkReaped() {
  if (pid_ > 0) pid_ = -pid_;
  pidfd_.Reset();
}

Result<ChildProcess> SpawnSandboxed(const SpawnOptions& spawn, const SandboxOptions& sandbox) {
  if (spawn.fds.size() > 16) return InvalidArgument("spawn: at most 16 descriptors");
  // Everything the child touches is built here: it may not allocate.
  std::vector<std::string> argv_s =
      spawn.argv.empty() ? std::vector<std::string>{spawn.file} : spawn.argv;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = spawn.env;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  int high_fd = 3;
  for (const auto& [target, src] : spawn.fds) high_fd = std::max(high_fd, target + 1);

  UniqueFd devnull(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull.valid()) return ErrnoStatus("open /dev/null", errno);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
  UniqueFd err_read(p[0]), err_write(p[1]);

  // No signal handler may run in the child between fork and the reset of the dispositions.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = fork();
  if (pid == 0) {
    RunChild(err_write.get(), devnull.get(), spawn.file.c_str(), argv.data(), envp.data(),
             spawn.fds.data(), spawn.fds.size(), high_fd, sandbox);
  }
  const int fork_err = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return ErrnoStatus("fork", fork_err);
  err_write.Reset();

  ChildError e{};
  ssize_t n;
  do {
    n = read(err_read.get(), &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof e)) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return Internal("sandbox: " + std::string(StepName(e.step)) +
                    (e.step == kStepExec ? " " + spawn.file : std::string()) + ": " +
                    std::strerror(e.err));
  }
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    const int err = errno;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    return ErrnoStatus("pidfd_open", err);
  }
  return ChildProcess(pid, std::move(pidfd));
}

}  // namespace shoal
