#include "shoal/runtime/node/zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "shoal/common/clock.h"
#include "shoal/common/enum_names.h"
#include "shoal/common/log.h"

namespace shoal {
namespace {

int64_t NowMs() { return static_cast<int64_t>(MonotonicNs() / 1000000); }

// Waits for `fd` readable up to the deadline; false on timeout.
bool WaitReadable(int fd, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - NowMs();
    if (left < 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the read report it
  }
}

std::string DescribeStatus(int status) {
  char buf[96];
  if (WIFSIGNALED(status)) {
    std::snprintf(buf, sizeof buf, "killed by signal %d (%s)", WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
  } else if (WIFEXITED(status)) {
    std::snprintf(buf, sizeof buf, "exited with status %d", WEXITSTATUS(status));
  } else {
    std::snprintf(buf, sizeof buf, "ended (wait status %#x)", status);
  }
  return buf;
}

// The parent pid and real uid of `pid`, from /proc.
bool ProcIds(pid_t pid, pid_t* ppid, uid_t* uid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  bool got_ppid = false, got_uid = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PPid:", 0) == 0) {
      *ppid = static_cast<pid_t>(std::strtol(line.c_str() + 5, nullptr, 10));
      got_ppid = true;
    } else if (line.rfind("Uid:", 0) == 0) {
      *uid = static_cast<uid_t>(std::strtoul(line.c_str() + 4, nullptr, 10));
      got_uid = true;
    }
  }
  return got_ppid && got_uid;
}

}  // namespace

const char* ZygoteStateName(Zygote::State s) {
  using S = Zygote::State;
  static constexpr EnumName<S> kNames[] = {{S::kStarting, "starting"},
                                           {S::kReady, "ready"},
                                           {S::kFailed, "failed"},
                                           {S::kUnforkable, "unforkable"},
                                           {S::kGone, "gone"}};
  return NameOf(kNames, s, "?");
}

Result<std::unique_ptr<Zygote>> Zygote::Start(SpawnOptions spawn, const SandboxOptions& sandbox,
                                              int log_fd, std::unique_ptr<InstanceCgroup> cgroup,
                                              std::map<std::pair<pid_t, pid_t>, int>* exits) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("zygote: socketpair", errno);
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  spawn.env.push_back("SHOAL_ZYGOTE=1");
  spawn.fds.emplace_back(1, log_fd);
  spawn.fds.emplace_back(2, log_fd);
  spawn.fds.emplace_back(kZygoteControlFd, theirs.get());
  SandboxOptions sb = sandbox;
  sb.cgroup = cgroup.get();
  auto child = SpawnSandboxed(spawn, sb);
  if (!child.ok()) return child.status();
  std::unique_ptr<Zygote> z(new Zygote());
  z->child_ = std::move(*child);
  z->control_ = std::move(ours);
  z->cgroup_ = std::move(cgroup);
  z->exits_ = exits;
  z->pid_ = z->child_.pid();
  return z;
}

Zygote::~Zygote() {
  DrainExits();
  control_.Reset();  // it exits on end of file; SIGKILL in case it is stuck
  child_.Signal(SIGKILL);
  if (child_.pid() > 0) {
    int status = 0;
    while (waitpid(child_.pid(), &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void Zygote::MarkGone(const std::string& during) {
  if (state_ == State::kGone) return;
  child_.Signal(SIGKILL);
  int status = 0;
  if (child_.pid() > 0) {
    while (waitpid(child_.pid(), &status, 0) < 0 && errno == EINTR) {
    }
  }
  const pid_t pid = child_.pid() > 0 ? child_.pid() : -child_.pid();
  child_ = ChildProcess();
  DrainExits();
  control_.Reset();
  std::string how = DescribeStatus(status);
  reason_ = "zygote (pid " + std::to_string(pid) + ") " + how + during;
  state_ = State::kGone;
}

bool Zygote::Exited() {
  if (state_ == State::kGone) return true;
  int status = 0;
  if (!child_.TryReap(&status)) return false;
  const pid_t pid = -child_.pid();
  child_ = ChildProcess();
  DrainExits();
  control_.Reset();
  if (state_ == State::kFailed) {
    reason_ += " (zygote pid " + std::to_string(pid) + " " + DescribeStatus(status) + ")";
  } else {
    reason_ = "zygote (pid " + std::to_string(pid) + ") " + DescribeStatus(status);
  }
  state_ = State::kGone;
  return true;
}

Zygote::State Zygote::WaitLoaded(int timeout_ms) {
  if (state_ != State::kStarting) return state_;
  if (!WaitReadable(control_.get(), NowMs() + timeout_ms)) return state_;
  ZygoteReply r;
  Status st = ReceivePacket(control_.get(), &r, sizeof r, nullptr);
  if (!st.ok()) {
    MarkGone(" before it reported its load");
    return state_;
  }
  r.message[sizeof r.message - 1] = 0;
  if (r.magic != kZygoteMagic) {
    MarkGone(": it sent a malformed load report");
    return state_;
  }
  switch (r.type) {
    case ZygoteMessage::kReady:
      state_ = State::kReady;
      break;
    case ZygoteMessage::kFailed:
      state_ = State::kFailed;
      reason_ = r.message;
      break;
    case ZygoteMessage::kUnforkable:
      state_ = State::kUnforkable;
      reason_ = r.message;
      break;
    default:
      MarkGone(": it sent an unexpected load report");
      break;
  }
  return state_;
}

Result<Zygote::Forked> Zygote::Fork(int timeout_ms) {
  if (state_ != State::kReady) {
    return Unavailable("zygote is " + std::string(ZygoteStateName(state_)));
  }
  ZygoteFork req;
  Status st = SendPacket(control_.get(), &req, sizeof req, {});
  if (!st.ok()) {
    MarkGone(" before a fork (" + st.message() + ")");
    return Unavailable(reason_);
  }
  ZygoteReply r;
  std::vector<int> fds;
  const int64_t deadline = NowMs() + timeout_ms;
  do {
    for (int fd : fds) close(fd);
    fds.clear();
    st = Next(&r, deadline, &fds);
  } while (st.ok() && r.type == ZygoteMessage::kExited);
  if (st.code() == StatusCode::kDeadlineExceeded) {
    MarkGone(": it did not answer a fork within " + std::to_string(timeout_ms) +
             " ms and was killed");
    return Unavailable(reason_);
  }
  if (!st.ok()) {
    MarkGone(" during a fork");
    return Unavailable(reason_);
  }
  UniqueFd start(fds.size() == 1 ? fds[0] : -1);
  if (fds.size() > 1) {
    for (int fd : fds) close(fd);
  }
  if (r.type != ZygoteMessage::kForked || (r.pid > 0 && !start.valid())) {
    MarkGone(": it answered a fork with a malformed message and was killed");
    return Unavailable(reason_);
  }
  if (r.pid <= 0) {
    return Internal(std::string("zygote: fork failed: ") + std::strerror(r.err) +
                    (r.message[0] ? std::string(" (") + r.message + ")" : std::string()));
  }
  // The pid comes from a process that runs tenant code: believe it only for a child of the
  // zygote running as the zygote's uid (the caller checks it is no instance it knows).
  pid_t ppid = 0;
  uid_t uid = 0, zuid = 0;
  pid_t zppid = 0;
  if (!ProcIds(r.pid, &ppid, &uid) || !ProcIds(child_.pid(), &zppid, &zuid) ||
      ppid != child_.pid() || uid != zuid) {
    return Internal("zygote reported pid " + std::to_string(r.pid) +
                    ", which is not a new instance forked by it");
  }
  return Forked{r.pid, std::move(start)};
}

Status Zygote::Start(const Forked& child, uint32_t endpoint, uint32_t slot, int dataplane_fd,
                     int out_fd, int err_fd) {
  ZygoteStart req;
  req.endpoint = endpoint;
  req.slot = slot;
  return SendPacket(child.start.get(), &req, sizeof req, {dataplane_fd, out_fd, err_fd});
}

Status Zygote::Next(ZygoteReply* r, int64_t deadline_ms, std::vector<int>* fds) {
  {
    if (!control_.valid()) return Unavailable("zygote is gone");
    if (!WaitReadable(control_.get(), deadline_ms))
      return Status(StatusCode::kDeadlineExceeded, "");
    Status st = ReceivePacket(control_.get(), r, sizeof *r, fds);
    if (!st.ok()) return st;
    r->message[sizeof r->message - 1] = 0;
    if (r->magic != kZygoteMagic) return InvalidArgument("zygote: bad magic");
    if (r->type == ZygoteMessage::kExited && exits_ != nullptr) (*exits_)[{pid_, r->pid}] = r->err;
    return {};
  }
}

void Zygote::DrainExits() {
  if (!control_.valid()) return;
  // Only exit reports come unasked (anything else here is out of turn and dropped); bounded,
  // so that a zygote writing without end cannot hold shoald here.
  ZygoteReply r;
  for (int i = 0; i < 4096 && Next(&r, 0).ok(); ++i) {
  }
}

bool Zygote::CollectExit(pid_t pid, int timeout_ms) {
  auto reported = [&] { return exits_ != nullptr && exits_->count({pid_, pid}) > 0; };
  if (reported()) return true;
  if (state_ != State::kReady) return false;
  ZygoteReply r;
  const int64_t deadline = NowMs() + timeout_ms;
  while (exits_ != nullptr && !reported()) {
    Status st = Next(&r, deadline);
    if (st.code() == StatusCode::kDeadlineExceeded) {
      MarkGone(": it did not report an instance's exit within " + std::to_string(timeout_ms) +
               " ms and was killed");
      break;
    }
    if (!st.ok()) {
      MarkGone("");
      break;
    }
  }
  return reported();
}

}  // namespace shoal
