#include "shoal/runtime/instance/zygote_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "shoal/common/log.h"
#include "shoal/runtime/instance/zygote_protocol.h"

namespace shoal {
namespace {

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return 0;
}

void Send(int control_fd, ZygoteMessage type, int32_t pid, int32_t err, const std::string& why) {
  ZygoteReply r;
  r.type = type;
  r.pid = pid;
  r.err = err;
  std::snprintf(r.message, sizeof r.message, "%s", why.c_str());
  // Unsent, shoald is gone or its socket broke: the next read of the control socket ends
  // this zygote.
  if (Status st = SendPacket(control_fd, &r, sizeof r, {}); !st.ok()) {
    spdlog::error("zygote: reply to shoald not sent: {}", st.ToString());
  }
}

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

// The forked child's per-instance part. Blocks on its start socket until shoald starts it
// (after moving it into the instance's cgroup); end of file there means shoald dropped it.
// The socket stays open as the instance's lifeline: its end of file later means shoald is gone.
bool BecomeInstance(int start_fd, InstanceOptions* o) {
  ZygoteStart req;
  std::vector<int> fds;
  Status st = ReceivePacket(start_fd, &req, sizeof req, &fds);
  if (!st.ok() || req.magic != kZygoteMagic || req.type != ZygoteMessage::kStart ||
      fds.size() != kZygoteStartFds) {
    _exit(st.ok() ? 2 : 0);
  }
  // Its parent is the zygote (which reports its exit to shoald); if the zygote dies it is
  // re-parented to shoald, the child subreaper. No parent-death signal: a zygote's crash must
  // not take its instances along. They end with shoald through the lifeline instead.
  // The data-plane socket at fd 3, as for a spawned instance; stdout/stderr to shoald's pipes.
  if (dup2(fds[0], 3) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) _exit(1);
  CloseAll(fds);
  o->fd = 3;
  o->lifeline_fd = start_fd;
  o->endpoint = req.endpoint;
  o->slot = req.slot;
  setenv("SHOAL_ENDPOINT", std::to_string(req.endpoint).c_str(), 1);
  setenv("SHOAL_SLOT", std::to_string(req.slot).c_str(), 1);
  unsetenv("SHOAL_ZYGOTE");
  // Every child would otherwise draw the zygote's random sequence. (OpenSSL's DRBG reseeds by
  // itself on a pid change; std::random_device reads the kernel each time.)
  unsigned seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = static_cast<unsigned>(getpid());
  srandom(seed);
  srand(seed);
  InitLogging("shoal-fn[" + o->function + "/" + std::to_string(o->endpoint) + "]",
              std::getenv("SHOAL_LOG_LEVEL") ? std::getenv("SHOAL_LOG_LEVEL") : "info");
  return true;
}

}  // namespace

void ReportZygoteFailure(int control_fd, const std::string& why) {
  Send(control_fd, ZygoteMessage::kFailed, 0, 0, why);
}

Result<bool> ServeAsZygote(int control_fd, InstanceOptions* options) {
  // A fork copies only the calling thread: a handler that started threads at load would find
  // them missing in every instance (and their locks possibly held). Such a zygote refuses.
  if (const int threads = ThreadCount(); threads != 1) {
    const std::string why = "the handler runs " + std::to_string(threads) +
                            " threads after loading; a zygote forks only single-threaded";
    Send(control_fd, ZygoteMessage::kUnforkable, 0, 0, why);
    return Internal(why);
  }
  // Its children's exits arrive on a signalfd beside the control socket: the zygote reaps them
  // and reports each wait status to shoald, which watches every instance by its pidfd.
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);
  const int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    const std::string why = std::string("signalfd: ") + std::strerror(errno);
    ReportZygoteFailure(control_fd, why);
    return Internal(why);
  }
  Send(control_fd, ZygoteMessage::kReady, 0, 0, "");
  spdlog::info(
      "zygote: function {}: handler {} loaded, pool {} attached; forking instances on "
      "request",
      options->function, options->handler, options->pool);
  for (;;) {
    pollfd fds[2] = {{control_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("zygote: poll: {}", std::strerror(errno));
      return false;
    }
    if (fds[1].revents != 0) {
      signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
      }
      int status = 0;
      for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
        Send(control_fd, ZygoteMessage::kExited, pid, status, "");
      }
    }
    if (fds[0].revents == 0) continue;
    ZygoteFork req;
    std::vector<int> got;
    Status st = ReceivePacket(control_fd, &req, sizeof req, &got);
    CloseAll(got);  // a kFork carries none
    if (!st.ok()) {
      if (st.code() != StatusCode::kUnavailable) spdlog::error("zygote: {}", st.ToString());
      return false;  // shoald closed the socket (or broke it): done
    }
    if (req.magic != kZygoteMagic || req.type != ZygoteMessage::kFork) {
      Send(control_fd, ZygoteMessage::kForked, -1, EINVAL, "malformed fork request");
      continue;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      const int err = errno;
      Send(control_fd, ZygoteMessage::kForked, -1, err, "socketpair");
      continue;
    }
    const pid_t child = fork();
    if (child == 0) {
      close(sfd);
      close(control_fd);
      close(sv[0]);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      return BecomeInstance(sv[1], options);
    }
    const int err = errno;
    close(sv[1]);
    if (child > 0) {
      ZygoteReply r;
      r.type = ZygoteMessage::kForked;
      r.pid = child;
      if (Status st = SendPacket(control_fd, &r, sizeof r, {sv[0]}); !st.ok()) {
        // shoald never learns of the child; its end of the socket pair closes below, so the
        // child sees its socket closed instead of a start.
        spdlog::error("zygote: fork of pid {} not reported to shoald: {}", child, st.ToString());
      }
    } else {
      Send(control_fd, ZygoteMessage::kForked, -1, err, std::strerror(err));
    }
    close(sv[0]);
  }
}

}  // namespace shoal
