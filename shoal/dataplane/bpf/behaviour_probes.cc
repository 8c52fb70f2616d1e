#include "shoal/dataplane/bpf/behaviour_probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include "shoal/dataplane/bpf/bpf_loader.h"
#include "shoal_behaviour.skel.h"

namespace shoal {
namespace {

static_assert(SHOAL_BHV_NR_OPEN == SYS_open && SHOAL_BHV_NR_OPENAT == SYS_openat &&
                  SHOAL_BHV_NR_OPENAT2 == SYS_openat2 && SHOAL_BHV_NR_CONNECT == SYS_connect &&
                  SHOAL_BHV_NR_EXECVE == SYS_execve && SHOAL_BHV_NR_EXECVEAT == SYS_execveat,
              "behaviour_abi.h names x86-64 syscall numbers");
static_assert(sizeof(shoal_bhv_counters) == (SHOAL_BHV_CLASSES + 8) * 8);
static_assert(sizeof(shoal_bhv_event) == 8 + 4 + 4 + 2 + 2 + 16 + SHOAL_BHV_DETAIL);
static_assert(offsetof(shoal_bhv_event, detail) == 36);

struct ClassOf {
  long nr;
  uint32_t cls;
};
// The syscalls an instance makes, by class (every other number is OTHER).
constexpr ClassOf kClasses[] = {
    // files
    {SYS_read, SHOAL_BHV_CLASS_FILE},
    {SYS_write, SHOAL_BHV_CLASS_FILE},
    {SYS_open, SHOAL_BHV_CLASS_FILE},
    {SYS_openat, SHOAL_BHV_CLASS_FILE},
    {SYS_openat2, SHOAL_BHV_CLASS_FILE},
    {SYS_close, SHOAL_BHV_CLASS_FILE},
    {SYS_stat, SHOAL_BHV_CLASS_FILE},
    {SYS_fstat, SHOAL_BHV_CLASS_FILE},
    {SYS_lstat, SHOAL_BHV_CLASS_FILE},
    {SYS_newfstatat, SHOAL_BHV_CLASS_FILE},
    {SYS_statx, SHOAL_BHV_CLASS_FILE},
    {SYS_lseek, SHOAL_BHV_CLASS_FILE},
    {SYS_pread64, SHOAL_BHV_CLASS_FILE},
    {SYS_pwrite64, SHOAL_BHV_CLASS_FILE},
    {SYS_readv, SHOAL_BHV_CLASS_FILE},
    {SYS_writev, SHOAL_BHV_CLASS_FILE},
    {SYS_access, SHOAL_BHV_CLASS_FILE},
    {SYS_faccessat, SHOAL_BHV_CLASS_FILE},
    {SYS_faccessat2, SHOAL_BHV_CLASS_FILE},
    {SYS_getdents64, SHOAL_BHV_CLASS_FILE},
    {SYS_readlink, SHOAL_BHV_CLASS_FILE},
    {SYS_readlinkat, SHOAL_BHV_CLASS_FILE},
    {SYS_unlink, SHOAL_BHV_CLASS_FILE},
    {SYS_unlinkat, SHOAL_BHV_CLASS_FILE},
    {SYS_rename, SHOAL_BHV_CLASS_FILE},
    {SYS_renameat2, SHOAL_BHV_CLASS_FILE},
    {SYS_mkdir, SHOAL_BHV_CLASS_FILE},
    {SYS_mkdirat, SHOAL_BHV_CLASS_FILE},
    {SYS_fcntl, SHOAL_BHV_CLASS_FILE},
    {SYS_ioctl, SHOAL_BHV_CLASS_FILE},
    {SYS_dup, SHOAL_BHV_CLASS_FILE},
    {SYS_dup2, SHOAL_BHV_CLASS_FILE},
    {SYS_dup3, SHOAL_BHV_CLASS_FILE},
    {SYS_ftruncate, SHOAL_BHV_CLASS_FILE},
    {SYS_chmod, SHOAL_BHV_CLASS_FILE},
    {SYS_fchmod, SHOAL_BHV_CLASS_FILE},
    {SYS_chown, SHOAL_BHV_CLASS_FILE},
    {SYS_fchown, SHOAL_BHV_CLASS_FILE},
    // network
    {SYS_socket, SHOAL_BHV_CLASS_NET},
    {SYS_socketpair, SHOAL_BHV_CLASS_NET},
    {SYS_connect, SHOAL_BHV_CLASS_NET},
    {SYS_accept, SHOAL_BHV_CLASS_NET},
    {SYS_accept4, SHOAL_BHV_CLASS_NET},
    {SYS_bind, SHOAL_BHV_CLASS_NET},
    {SYS_listen, SHOAL_BHV_CLASS_NET},
    {SYS_sendto, SHOAL_BHV_CLASS_NET},
    {SYS_recvfrom, SHOAL_BHV_CLASS_NET},
    {SYS_sendmsg, SHOAL_BHV_CLASS_NET},
    {SYS_recvmsg, SHOAL_BHV_CLASS_NET},
    {SYS_sendmmsg, SHOAL_BHV_CLASS_NET},
    {SYS_recvmmsg, SHOAL_BHV_CLASS_NET},
    {SYS_shutdown, SHOAL_BHV_CLASS_NET},
    {SYS_getsockopt, SHOAL_BHV_CLASS_NET},
    {SYS_setsockopt, SHOAL_BHV_CLASS_NET},
    {SYS_getsockname, SHOAL_BHV_CLASS_NET},
    {SYS_getpeername, SHOAL_BHV_CLASS_NET},
    // processes
    {SYS_clone, SHOAL_BHV_CLASS_PROCESS},
    {SYS_clone3, SHOAL_BHV_CLASS_PROCESS},
    {SYS_fork, SHOAL_BHV_CLASS_PROCESS},
    {SYS_vfork, SHOAL_BHV_CLASS_PROCESS},
    {SYS_execve, SHOAL_BHV_CLASS_PROCESS},
    {SYS_execveat, SHOAL_BHV_CLASS_PROCESS},
    {SYS_exit, SHOAL_BHV_CLASS_PROCESS},
    {SYS_exit_group, SHOAL_BHV_CLASS_PROCESS},
    {SYS_wait4, SHOAL_BHV_CLASS_PROCESS},
    {SYS_waitid, SHOAL_BHV_CLASS_PROCESS},
    {SYS_kill, SHOAL_BHV_CLASS_PROCESS},
    {SYS_tgkill, SHOAL_BHV_CLASS_PROCESS},
    {SYS_tkill, SHOAL_BHV_CLASS_PROCESS},
    {SYS_prctl, SHOAL_BHV_CLASS_PROCESS},
    {SYS_setuid, SHOAL_BHV_CLASS_PROCESS},
    {SYS_setgid, SHOAL_BHV_CLASS_PROCESS},
    {SYS_ptrace, SHOAL_BHV_CLASS_PROCESS},
    {SYS_pidfd_open, SHOAL_BHV_CLASS_PROCESS},
    // memory
    {SYS_mmap, SHOAL_BHV_CLASS_MEMORY},
    {SYS_munmap, SHOAL_BHV_CLASS_MEMORY},
    {SYS_mprotect, SHOAL_BHV_CLASS_MEMORY},
    {SYS_brk, SHOAL_BHV_CLASS_MEMORY},
    {SYS_madvise, SHOAL_BHV_CLASS_MEMORY},
    {SYS_mremap, SHOAL_BHV_CLASS_MEMORY},
    {SYS_memfd_create, SHOAL_BHV_CLASS_MEMORY},
    // waiting and synchronisation
    {SYS_futex, SHOAL_BHV_CLASS_SYNC},
    {SYS_poll, SHOAL_BHV_CLASS_SYNC},
    {SYS_ppoll, SHOAL_BHV_CLASS_SYNC},
    {SYS_select, SHOAL_BHV_CLASS_SYNC},
    {SYS_pselect6, SHOAL_BHV_CLASS_SYNC},
    {SYS_epoll_wait, SHOAL_BHV_CLASS_SYNC},
    {SYS_epoll_pwait, SHOAL_BHV_CLASS_SYNC},
    {SYS_epoll_pwait2, SHOAL_BHV_CLASS_SYNC},
    {SYS_epoll_ctl, SHOAL_BHV_CLASS_SYNC},
    {SYS_epoll_create1, SHOAL_BHV_CLASS_SYNC},
    {SYS_eventfd2, SHOAL_BHV_CLASS_SYNC},
    {SYS_sched_yield, SHOAL_BHV_CLASS_SYNC},
    // time
    {SYS_clock_gettime, SHOAL_BHV_CLASS_TIME},
    {SYS_clock_nanosleep, SHOAL_BHV_CLASS_TIME},
    {SYS_nanosleep, SHOAL_BHV_CLASS_TIME},
    {SYS_gettimeofday, SHOAL_BHV_CLASS_TIME},
    {SYS_timerfd_create, SHOAL_BHV_CLASS_TIME},
    {SYS_timerfd_settime, SHOAL_BHV_CLASS_TIME},
    {SYS_setitimer, SHOAL_BHV_CLASS_TIME},
    {SYS_alarm, SHOAL_BHV_CLASS_TIME},
};

int OnEvent(void* ctx, void* data, size_t size) {
  if (size < sizeof(BehaviourEvent)) return 0;
  auto* sink = static_cast<std::function<void(const BehaviourEvent&)>*>(ctx);
  BehaviourEvent ev;
  std::memcpy(&ev, data, sizeof ev);
  ev.detail[SHOAL_BHV_DETAIL - 1] = 0;
  if (sink != nullptr && *sink) (*sink)(ev);
  return 0;
}

}  // namespace

uint32_t BehaviourProbes::SyscallClass(uint32_t nr) {
  for (const auto& c : kClasses) {
    if (c.nr == static_cast<long>(nr)) return c.cls;
  }
  return SHOAL_BHV_CLASS_OTHER;
}

const char* BehaviourProbes::ClassName(uint32_t cls) {
  static constexpr const char* kNames[SHOAL_BHV_CLASSES] = {"file", "net",  "process", "memory",
                                                            "sync", "time", "other"};
  return cls < SHOAL_BHV_CLASSES ? kNames[cls] : "?";
}

Result<uint64_t> BehaviourProbes::CgroupIdOf(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat cgroup " + dir, errno);
  return static_cast<uint64_t>(st.st_ino);
}

Result<std::unique_ptr<BehaviourProbes>> BehaviourProbes::Load(CgroupMode mode, Syscalls syscalls) {
  ebpf_internal::RouteLibbpfLogs();
  std::unique_ptr<BehaviourProbes> p(new BehaviourProbes(mode, syscalls));
  p->skel_ = shoal_behaviour__open();
  if (p->skel_ == nullptr) return ErrnoStatus("open BPF object shoal_behaviour", errno);
  p->skel_->rodata->cgroup_mode =
      mode == CgroupMode::kV2 ? SHOAL_BHV_CGROUP_V2 : SHOAL_BHV_CGROUP_V1_MEMORY;
  p->skel_->rodata->syscall_hook = syscalls == Syscalls::kOff      ? SHOAL_BHV_SYSCALLS_OFF
                                   : syscalls == Syscalls::kAlways ? SHOAL_BHV_SYSCALLS_ALWAYS
                                                                   : SHOAL_BHV_SYSCALLS_SAMPLED;
  bpf_program__set_autoload(p->skel_->progs.shoal_bhv_sys_enter, syscalls != Syscalls::kOff);
  // Sampled: attached by AttachSyscalls only.
  bpf_program__set_autoattach(p->skel_->progs.shoal_bhv_sys_enter, syscalls == Syscalls::kAlways);
  if (int err = shoal_behaviour__load(p->skel_); err != 0) {
    return ebpf_internal::LoadFailed("load BPF programs shoal_behaviour", -err);
  }
  auto ncpu = ebpf_internal::PossibleCpus();
  if (!ncpu.ok()) return ncpu.status();
  p->num_cpus_ = *ncpu;
  const int classes = bpf_map__fd(p->skel_->maps.syscall_class);
  for (const auto& c : kClasses) {
    const uint32_t key = static_cast<uint32_t>(c.nr);
    if (key >= SHOAL_BHV_MAX_SYSCALL) continue;
    if (bpf_map_update_elem(classes, &key, &c.cls, BPF_ANY) != 0) {
      return ErrnoStatus("fill syscall_class", errno);
    }
  }
  for (uint32_t key = 0; key < SHOAL_BHV_MAX_SYSCALL; ++key) {
    if (SyscallClass(key) != SHOAL_BHV_CLASS_OTHER) continue;
    const uint32_t other = SHOAL_BHV_CLASS_OTHER;
    if (bpf_map_update_elem(classes, &key, &other, BPF_ANY) != 0) {
      return ErrnoStatus("fill syscall_class", errno);
    }
  }
  if (int err = shoal_behaviour__attach(p->skel_); err != 0) {
    return ErrnoStatus("attach the behaviour probes to their raw tracepoints", -err);
  }
  p->sink_ = new std::function<void(const BehaviourEvent&)>();
  p->ring_ = ring_buffer__new(bpf_map__fd(p->skel_->maps.events), OnEvent, p->sink_, nullptr);
  if (p->ring_ == nullptr) return ErrnoStatus("open the behaviour ring buffer", errno);
  return p;
}

BehaviourProbes::~BehaviourProbes() {
  DetachSyscalls();
  if (ring_ != nullptr) ring_buffer__free(ring_);
  delete sink_;
  if (skel_ != nullptr) shoal_behaviour__destroy(skel_);
}

Status BehaviourProbes::Watch(uint64_t cgroup_id, int pid) {
  std::vector<BehaviourCounters> zero(static_cast<size_t>(num_cpus_));
  std::memset(zero.data(), 0, zero.size() * sizeof(BehaviourCounters));
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.instances), &cgroup_id, zero.data(), BPF_ANY) !=
      0) {
    return ErrnoStatus("watch cgroup " + std::to_string(cgroup_id), errno);
  }
  const uint32_t tgid = static_cast<uint32_t>(pid);
  if (pid > 0 &&
      bpf_map_update_elem(bpf_map__fd(skel_->maps.pids), &tgid, &cgroup_id, BPF_ANY) != 0) {
    return ErrnoStatus("watch pid " + std::to_string(pid), errno);
  }
  return Status::Ok();
}

uint64_t BehaviourProbes::CgroupOfPid(int pid) const {
  const uint32_t tgid = static_cast<uint32_t>(pid);
  uint64_t cgroup_id = 0;
  if (pid <= 0 || bpf_map_lookup_elem(bpf_map__fd(skel_->maps.pids), &tgid, &cgroup_id) != 0) {
    return 0;
  }
  return cgroup_id;
}

Status BehaviourProbes::AttachSyscalls() {
  if (syscalls_ != Syscalls::kSampled || sys_enter_link_ != nullptr) return Status::Ok();
  bpf_link* link = bpf_program__attach(skel_->progs.shoal_bhv_sys_enter);
  if (link == nullptr) return ErrnoStatus("attach sys_enter", errno);
  sys_enter_link_ = link;
  return Status::Ok();
}

void BehaviourProbes::DetachSyscalls() {
  if (sys_enter_link_ == nullptr) return;
  bpf_link__destroy(sys_enter_link_);
  sys_enter_link_ = nullptr;
}

void BehaviourProbes::Unwatch(uint64_t cgroup_id) {
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.instances), &cgroup_id);
  // Its processes.
  const int pids = bpf_map__fd(skel_->maps.pids);
  std::vector<uint32_t> gone;
  uint32_t pid_key = 0, pid_next = 0;
  const void* pid_prev = nullptr;
  while (bpf_map_get_next_key(pids, pid_prev, &pid_next) == 0) {
    uint64_t owner = 0;
    if (bpf_map_lookup_elem(pids, &pid_next, &owner) == 0 && owner == cgroup_id) {
      gone.push_back(pid_next);
    }
    pid_key = pid_next;
    pid_prev = &pid_key;
  }
  for (uint32_t p : gone) bpf_map_delete_elem(pids, &p);
  // The seen-events set's entries of this cgroup (the key's first 8 bytes).
  const int seen = bpf_map__fd(skel_->maps.seen);
  struct {
    uint64_t cgroup_id, hash;
  } key{}, next{};
  std::vector<decltype(key)> doomed;
  const void* prev = nullptr;
  while (bpf_map_get_next_key(seen, prev, &next) == 0) {
    if (next.cgroup_id == cgroup_id) doomed.push_back(next);
    key = next;
    prev = &key;
  }
  for (const auto& k : doomed) bpf_map_delete_elem(seen, &k);
}

Result<BehaviourCounters> BehaviourProbes::Read(uint64_t cgroup_id) const {
  BehaviourCounters sum{};
  auto add = [](BehaviourCounters& s, const BehaviourCounters& c) {
    for (int i = 0; i < SHOAL_BHV_CLASSES; ++i) s.syscalls[i] += c.syscalls[i];
    s.execs += c.execs;
    s.connects += c.connects;
    s.opens += c.opens;
    s.forks += c.forks;
    s.bytes_sent += c.bytes_sent;
    s.bytes_recv += c.bytes_recv;
    s.cpu_ns += c.cpu_ns;
    s.events_lost += c.events_lost;
  };
  if (!ebpf_internal::SumPerCpu(bpf_map__fd(skel_->maps.instances), &cgroup_id, num_cpus_, sum,
                                add)) {
    if (errno == ENOENT) return NotFound("cgroup " + std::to_string(cgroup_id) + " is not watched");
    return ErrnoStatus("read behaviour counters", errno);
  }
  return sum;
}

size_t BehaviourProbes::Drain(const std::function<void(const BehaviourEvent&)>& sink) {
  size_t n = 0;
  *sink_ = [&](const BehaviourEvent& ev) {
    ++n;
    sink(ev);
  };
  ring_buffer__consume(ring_);
  *sink_ = nullptr;
  return n;
}

size_t BehaviourProbes::CountKeys(int fd, size_t key_size) const {
  std::vector<uint8_t> key(key_size), next(key_size);
  size_t n = 0;
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    ++n;
    key = next;
    prev = key.data();
  }
  return n;
}

size_t BehaviourProbes::WatchedEntries() const {
  return CountKeys(bpf_map__fd(skel_->maps.instances), sizeof(uint64_t));
}

size_t BehaviourProbes::SeenEntries() const { return CountKeys(bpf_map__fd(skel_->maps.seen), 16); }

size_t BehaviourProbes::PidEntries() const {
  return CountKeys(bpf_map__fd(skel_->maps.pids), sizeof(uint32_t));
}

}  // namespace shoal
