#include "shoal/runtime/zygote_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "shoal/common/log.h"
#include "shoal/runtime/zygote_protocol.h"

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
  (void)SendPacket(control_fd, &r, sizeof r, {});
}

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

// The forked child's per-instance part. Blocks until shoald releases it (after moving it into
// the instance's cgroup); end of file there means shoald refused it.
bool BecomeInstance(const ZygoteFork& req, const std::vector<int>& fds, InstanceOptions* o) {
  char go = 0;
  ssize_t n;
  do {
    n = read(fds[3], &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) _exit(1);
  // Its parent is shoald now (a child subreaper; the zygote's intermediate has exited): die with
  // it, as a spawned instance does.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) _exit(1);
  // The data-plane socket at fd 3, as for a spawned instance; stdout/stderr to shoald's pipes.
  if (dup2(fds[0], 3) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) _exit(1);
  CloseAll(fds);
  o->fd = 3;
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
  Send(control_fd, ZygoteMessage::kReady, 0, 0, "");
  spdlog::info("zygote: function {}: handler {} loaded, pool {} attached; forking instances on "
               "request",
               options->function, options->handler, options->pool);
  for (;;) {
    ZygoteFork req;
    std::vector<int> fds;
    Status st = ReceivePacket(control_fd, &req, sizeof req, &fds);
    if (!st.ok()) {
      if (st.code() == StatusCode::kUnavailable) return false;  // shoald closed it: done
      spdlog::error("zygote: {}", st.ToString());
      return false;
    }
    if (req.magic != kZygoteMagic || req.type != ZygoteMessage::kFork ||
        fds.size() != kZygoteForkFds) {
      CloseAll(fds);
      Send(control_fd, ZygoteMessage::kForked, -1, EINVAL, "malformed fork request");
      continue;
    }
    // Fork twice: the intermediate exits at once, so the instance is re-parented to shoald (a
    // child subreaper) and shoald reaps and watches it as it does a spawned instance. fork()
    // rather than a raw clone(CLONE_PARENT): libc's fork resets its thread state in the child.
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      const int err = errno;
      CloseAll(fds);
      Send(control_fd, ZygoteMessage::kForked, -1, err, "pipe2");
      continue;
    }
    const pid_t mid = fork();
    if (mid == 0) {
      close(p[0]);
      const pid_t child = fork();
      if (child == 0) {
        close(p[1]);
        close(control_fd);
        return BecomeInstance(req, fds, options);
      }
      const int32_t out = child > 0 ? child : -errno;
      (void)!write(p[1], &out, sizeof out);
      _exit(0);
    }
    close(p[1]);
    int32_t child = mid < 0 ? -errno : 0;
    if (mid > 0) {
      if (read(p[0], &child, sizeof child) != sizeof child) child = -EIO;
      int status = 0;
      while (waitpid(mid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    close(p[0]);
    CloseAll(fds);
    if (child > 0) {
      Send(control_fd, ZygoteMessage::kForked, child, 0, "");
    } else {
      Send(control_fd, ZygoteMessage::kForked, -1, -child, std::strerror(-child));
    }
  }
}

}  // namespace shoal
