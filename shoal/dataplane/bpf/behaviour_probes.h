// BehaviourProbes: the loaded behaviour BPF programs (shoal_behaviour.bpf.c), attached to their
// raw tracepoints for as long as the object lives. They count, per registered instance cgroup,
// what the instance does (syscalls by class, execve, connect, open, forks, socket bytes, CPU
// time) and send each distinct execve/connect/open once through a ring buffer. Loading needs
// CAP_BPF + CAP_PERFMON (root) and kernel BTF; Load says which is missing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shoal/common/status.h"
#include "shoal/dataplane/bpf/behaviour_abi.h"

struct shoal_behaviour;  // the bpftool skeleton (shoal_behaviour.skel.h)
struct ring_buffer;
struct bpf_link;

namespace shoal {

using BehaviourCounters = shoal_bhv_counters;
using BehaviourEvent = shoal_bhv_event;

class BehaviourProbes {
 public:
  // Where instance cgroups live: which cgroup id the probes key on.
  enum class CgroupMode { kV2, kV1Memory };

  // How sys_enter is used. kAlways: attached from Load on (syscalls by class, open paths, every
  // connect); it costs every syscall of the node while attached (~130 ns on a 2-vCPU VM, the
  // hook alone: bench-detect). kOff: not loaded; execs (sched_process_exec), TCP connects
  // (inet_sock_set_state), forks, bytes and CPU time are still counted, and no syscall pays
  // anything. kSampled: loaded, attached only between AttachSyscalls and DetachSyscalls, when it
  // counts syscall classes and reports open attempts (execs and connects as with kOff; opens
  // are counted by the caller, e.g. fanotify).
  enum class Syscalls { kOff, kAlways, kSampled };
  static Result<std::unique_ptr<BehaviourProbes>> Load(CgroupMode mode,
                                                       Syscalls syscalls = Syscalls::kAlways);
  BehaviourProbes(const BehaviourProbes&) = delete;
  BehaviourProbes& operator=(const BehaviourProbes&) = delete;
  ~BehaviourProbes();  // detaches every program

  // Starts counting for the cgroup (its counters start at zero); an error when the map is full.
  // `pid`, when not 0, is the instance's process: CgroupOfPid knows it, and every process it
  // forks from now on.
  Status Watch(uint64_t cgroup_id, int pid = 0);
  // Stops counting and forgets the cgroup, its processes and the events it sent (no error when
  // it was not watched).
  void Unwatch(uint64_t cgroup_id);
  // The watched cgroup a process (by tgid, as the root pid namespace numbers it) belongs to:
  // an instance's process or one it forked while watched (also after it exited); 0 otherwise.
  uint64_t CgroupOfPid(int pid) const;
  // kSampled: attaches / detaches sys_enter (each a few syscalls; while attached every syscall
  // of the node pays for the hook). No-ops in the other modes; Attach is idempotent.
  Status AttachSyscalls();
  void DetachSyscalls();
  bool syscalls_attached() const { return sys_enter_link_ != nullptr; }
  Syscalls syscalls() const { return syscalls_; }
  // The cgroup's counters, summed over CPUs (NotFound when it is not watched).
  Result<BehaviourCounters> Read(uint64_t cgroup_id) const;
  // Hands every event waiting in the ring buffer to `sink`; returns how many.
  size_t Drain(const std::function<void(const BehaviourEvent&)>& sink);
  // Entries of the instances map and of the seen-events set (the soak's leak checks).
  size_t WatchedEntries() const;
  size_t SeenEntries() const;
  size_t PidEntries() const;
  CgroupMode mode() const { return mode_; }

  // The id the probes use for a cgroup directory: its inode number (the kernfs node id).
  static Result<uint64_t> CgroupIdOf(const std::string& dir);
  // The syscall class of an x86-64 syscall number (SHOAL_BHV_CLASS_*), as loaded in the map.
  static uint32_t SyscallClass(uint32_t nr);
  static const char* ClassName(uint32_t cls);

 private:
  BehaviourProbes(CgroupMode mode, Syscalls syscalls) : mode_(mode), syscalls_(syscalls) {}
  size_t CountKeys(int fd, size_t key_size) const;

  CgroupMode mode_;
  Syscalls syscalls_;
  bpf_link* sys_enter_link_ = nullptr;
  shoal_behaviour* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  int num_cpus_ = 0;
  std::function<void(const BehaviourEvent&)>* sink_ = nullptr;
};

}  // namespace shoal
