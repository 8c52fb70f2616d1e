// shoald's side of a function's zygote (zygote_protocol.h): a shoal-fn spawned through the
// same sandbox as an instance (the tenant's uid/gid, no capabilities, no_new_privs, the
// function's seccomp filter, a cgroup of its own) that has loaded the handler and attached the
// pool, and forks one instance per request. One zygote per function generation: it carries
// the function's tenant, handler, environment and seccomp filter, so none is ever shared
// across functions, let alone tenants.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/runtime/instance/zygote_protocol.h"
#include "shoal/runtime/sandbox/cgroup.h"
#include "shoal/runtime/sandbox/sandboxed_process.h"
#include "shoal/runtime/sandbox/unique_fd.h"

namespace shoal {

class Zygote {
 public:
  enum class State { kStarting, kReady, kFailed, kUnforkable, kGone };

  // Spawns it: `spawn` as for an instance (its environment gets SHOAL_ZYGOTE=1 here; no fd 3),
  // `log_fd` as its stdout and stderr. Returns once it has exec'd; it reports its load later.
  // The zygote is the parent of the instances it forks: it reaps them and reports each wait
  // status, which lands in *exits keyed {this zygote's pid, child pid}, so that a zygote (which
  // runs tenant code) can only ever speak of its own children; the map outlives the zygotes.
  // If it dies, its children are re-parented to shoald (a child subreaper).
  static Result<std::unique_ptr<Zygote>> Start(SpawnOptions spawn, const SandboxOptions& sandbox,
                                               int log_fd, std::unique_ptr<InstanceCgroup> cgroup,
                                               std::map<std::pair<pid_t, pid_t>, int>* exits);
  ~Zygote();  // kills and reaps it
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Waits up to timeout_ms for its load report (returns at once once it has one).
  State WaitLoaded(int timeout_ms);
  State state() const { return state_; }
  // Why it failed, cannot fork, or is gone.
  const std::string& reason() const { return reason_; }
  pid_t pid() const { return pid_; }

  // A forked child, waiting on its start socket: a child of the zygote running as its uid
  // (checked). It becomes an instance on Start() and exits on the socket's end of file; the
  // socket stays open as its lifeline (the instance exits when shoald is gone).
  struct Forked {
    pid_t pid = 0;
    UniqueFd start;
  };
  // Forks a child. kUnavailable when the zygote died or stalled past timeout_ms (it is then
  // killed and reaped, state kGone, reason() says how it ended).
  Result<Forked> Fork(int timeout_ms);
  // Sends a forked child its per-instance part.
  static Status Start(const Forked& child, uint32_t endpoint, uint32_t slot, int dataplane_fd,
                      int out_fd, int err_fd);
  // Non-blocking: true (and state kGone) once it has exited; reason() says how.
  bool Exited();
  // Waits up to timeout_ms for the report of `pid`'s exit (true once in *exits). A zygote that
  // does not report in time is killed (its children then are shoald's to reap).
  bool CollectExit(pid_t pid, int timeout_ms);

 private:
  Zygote() = default;
  void MarkGone(const std::string& during);
  // Reads the next message until the deadline; an exit report also lands in *exits_.
  // kUnavailable on end of file, kDeadlineExceeded on timeout.
  Status Next(ZygoteReply* r, int64_t deadline_ms, std::vector<int>* fds = nullptr);
  void DrainExits();  // non-blocking: every exit report already sent
  std::map<std::pair<pid_t, pid_t>, int>* exits_ = nullptr;
  pid_t pid_ = 0;  // its pid, kept after it is reaped
  ChildProcess child_;
  UniqueFd control_;
  std::unique_ptr<InstanceCgroup> cgroup_;
  State state_ = State::kStarting;
  std::string reason_;
};

const char* ZygoteStateName(Zygote::State s);

}  // namespace shoal
