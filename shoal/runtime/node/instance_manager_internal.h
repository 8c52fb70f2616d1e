// InstanceManager's own types and helpers, shared by the files it is split into:
// instance_manager.cc (start, pools, stop), instance_reconcile.cc (spec sync and autoscaling
// decisions), instance_spawn.cc (placement and process spawning), instance_zygotes.cc,
// instance_events.cc (readiness, exits, logs) and instance_view.cc (RuntimeView and metrics).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "shoal/common/clock.h"
#include "shoal/common/load_report.h"
#include "shoal/common/log.h"
#include "shoal/control/autoscaler/function_autoscaler.h"
#include "shoal/interfaces/fl_data_path.h"
#include "shoal/runtime/node/instance_manager.h"
#include "shoal/runtime/node/node_capacity.h"
#include "shoal/runtime/node/zygote.h"
#include "shoal/runtime/sandbox/cgroup.h"
#include "shoal/runtime/sandbox/cgroup_freezer.h"
#include "shoal/runtime/sandbox/handler_library.h"
#include "shoal/runtime/sandbox/sandboxed_process.h"
#include "shoal/runtime/sandbox/seccomp_policy.h"
#include "shoal/runtime/sandbox/seccomp_report.h"
#include "shoal/runtime/sandbox/tenant_ids.h"

namespace shoal {
namespace instance_manager_internal {

inline std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

}  // namespace instance_manager_internal

struct InstanceManager::Instance {
  enum class State { kStarting, kReady, kDraining, kStopping, kQuarantined };
  InstanceManager* mgr = nullptr;
  FunctionState* fn = nullptr;
  uint32_t key = 0;
  HolderSlot slot = 0;
  std::string tenant;
  int pid = 0;
  State state = State::kStarting;
  uint64_t spawn_ns = 0;
  uint64_t ready_ns = 0;
  uint64_t last_busy_ns = 0;
  Resources reserved;  // what placement reserved for it on this node
  bool holds_reservation = false;
  uint64_t last_served = 0;
  double cold_start_ms = 0;
  std::string start_path = "spawn";  // zygote | spawn
  std::string start_note;            // why a spawn where the zygote path was configured
  uint64_t prepare_ns = 0;           // its endpoint, cgroup and pipes, before spawn_ns
  uint64_t forked_ns = 0;            // zygote path: the zygote's answer, and the child's release
  uint64_t released_ns = 0;
  bool prefork = false;       // zygote path: started from the spare forked ahead
  uint32_t zygote_id = 0;     // which of its function's zygotes forked it (their count)
  int zygote_pid = 0;         // ... and that zygote's pid (its exit reports are believed)
  UniqueFd lifeline;          // zygote path: the child exits when this closes
  bool prewarmed = false;     // started ahead of demand by the autoscaling policy
  bool prewarm_used = false;  // ... and has taken its first request
  bool expected_exit = false;
  bool exited = false;
  LoadReport load;  // its handler's last load report (shoal/common/load_report.h)
  int open_handles = 0;
  Endpoint endpoint;  // keeps the sockmap anchor open for the instance's lifetime
  ChildProcess child;
  uv_poll_t exit_poll{};  // on the child's pidfd: readable once it has exited
  std::unique_ptr<InstanceCgroup> cgroup;
  std::unique_ptr<FrozenCgroup> frozen;  // quarantined: its processes, frozen
  std::string quarantine_reason;
  uv_pipe_t out{};
  uv_pipe_t err{};
  bool out_at_line_start = true;
  char read_buf[16384];
};

struct InstanceManager::FunctionState {
  std::shared_ptr<FunctionRuntime> rt;
  std::vector<Instance*> instances;
  // The scale bounds now: the spec's, or in cluster mode this node's share from its placement,
  // which the leader moves without a new generation (SyncSpecs applies it).
  uint32_t min_scale = 0;
  uint32_t max_scale = 0;
  uint32_t desired = 0;
  uint32_t crashes = 0;        // consecutive crashes (reset when one becomes ready)
  uint64_t next_spawn_ns = 0;  // crash back-off
  uint32_t restarts = 0;
  std::ofstream log;
  std::string unschedulable;  // placement's refusal (naming the resource); empty when it fits
  std::string start_error;    // why its instances cannot start (e.g. its handler library)
  std::optional<SeccompProgram> seccomp;  // compiled on the first start

  // Its zygote (instance_start: zygote). zygote_error: the last load failure (a start answers
  // it until a zygote loads again); zygote_unforkable: why instances are spawned instead.
  std::unique_ptr<Zygote> zygote;
  Zygote::State zygote_logged = Zygote::State::kStarting;
  uint64_t zygote_started_ns = 0;
  uint64_t zygote_retry_ns = 0;
  uint32_t zygote_failures = 0;
  uint32_t zygote_count = 0;
  std::string zygote_error;
  std::string zygote_unforkable;
  // A child forked ahead of demand, waiting for its start: the next instance start takes it,
  // so that its fork is not on a request's path; forked again on the next tick. It is moved
  // into a cgroup of its own (the next instance's) when forked, off the request's path too: a
  // cgroup migration waits for an RCU grace period, milliseconds on a busy node. A spare
  // dropped unstarted is killed, so that its cgroup is empty when removed.
  struct Spare {
    Spare(Zygote::Forked c, UniqueFd fd, uint32_t id, int zpid)
        : child(std::move(c)), pidfd(std::move(fd)), zygote_id(id), zygote_pid(zpid) {}
    Spare(Spare&&) = default;
    Spare& operator=(Spare&&) = default;
    ~Spare();
    std::unique_ptr<InstanceCgroup> cgroup;  // first: removed after the child is gone
    Zygote::Forked child;
    UniqueFd pidfd;
    uint32_t zygote_id = 0;
    int zygote_pid = 0;
  };
  std::optional<Spare> spare;

  // Autoscaling (null: policy none, the reactive rule).
  std::unique_ptr<FunctionAutoscaler> autoscaler;
  uint32_t target = 0;      // the policy's replicas + pre-warm, within min..max
  double keep_alive_s = 0;  // idle instances above the target stop after this
  ScalingDecision decision;
  bool have_decision = false;
  uint64_t decision_ns = 0;
  std::string decision_why;     // the numbers at the last change
  std::string decision_reason;  // decision_why and the policy's current Explain()
  uint64_t next_decision_ns = 0;
  uint64_t last_sample_ns = 0;
  FunctionRouter::Totals last_totals;
  uint32_t iv_cold = 0;  // cold starts since the last decision, and their cost
  double iv_cold_s = 0;
  double last_cold_s = 0;
  uint64_t prewarm_starts = 0;
  uint64_t cold_starts_avoided = 0;
  uint64_t cold_requests = 0;  // requests that waited for an instance's cold start
  double instance_s_done = 0;  // spawn-to-exit seconds of the instances that exited
};

}  // namespace shoal
