#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

// ---- zygotes ----------------------------------------------------------------------------

namespace {

// A zygote's load failure, with the handler library named by its path rather than by the
// descriptor the zygote loaded it through.
std::string LoadFailure(const FunctionSpec& spec, std::string why) {
  if (!spec.handler.library.empty()) {
    const std::string fd = "/proc/self/fd/4";
    for (size_t at = why.find(fd); at != std::string::npos; at = why.find(fd, at)) {
      why.replace(at, fd.size(), spec.handler.library);
      at += spec.handler.library.size();
    }
  }
  return "the handler failed to load in its zygote: " + why;
}

}  // namespace

void InstanceManager::EnsureZygote(FunctionState& f, uint64_t now) {
  if (config_.instance_start != InstanceStart::kZygote || f.rt->retired) return;
  const FunctionSpec& spec = f.rt->spec;
  if (f.zygote) {
    Zygote& z = *f.zygote;
    if (z.state() == Zygote::State::kStarting) z.WaitLoaded(0);
    if (z.state() != f.zygote_logged) {
      f.zygote_logged = z.state();
      switch (z.state()) {
        case Zygote::State::kReady:
          spdlog::info(
              "function {}: zygote (pid {}) ready in {:.2f} ms: handler loaded, pool "
              "attached",
              spec.name, z.pid(), (MonotonicNs() - f.zygote_started_ns) / 1e6);
          f.zygote_error.clear();
          f.zygote_failures = 0;
          break;
        case Zygote::State::kFailed:
          f.zygote_error = LoadFailure(spec, z.reason());
          spdlog::error("function {}: {}", spec.name, f.zygote_error);
          break;
        case Zygote::State::kUnforkable:
          // It will not get better for this generation: instances are spawned.
          f.zygote_unforkable = z.reason();
          spdlog::warn(
              "function {}: zygote (pid {}) cannot fork: {}; its instances start by a "
              "full spawn",
              spec.name, z.pid(), z.reason());
          f.zygote.reset();
          return;
        default:
          break;
      }
    }
    if (!z.Exited()) {
      // The next spare once no instance of f is starting: its fork and its cgroup migration
      // (an RCU grace period on the manager's loop, milliseconds on a busy node) would
      // otherwise hold up the start in flight, whose ready report this loop handles.
      const bool starting = std::any_of(f.instances.begin(), f.instances.end(), [](const auto* i) {
        return i->state == Instance::State::kStarting;
      });
      if (z.state() == Zygote::State::kReady && !f.spare && !starting) {
        // Without a spare the next start forks on demand; the next tick tries again.
        if (Status st = ForkSpare(f); !st.ok()) {
          spdlog::warn("function {}: no spare forked from the zygote: {}", f.rt->spec.name,
                       st.ToString());
        }
      }
      return;
    }
    f.spare.reset();
    if (f.zygote_logged != Zygote::State::kFailed) {
      spdlog::warn("function {}: {}; restarting it", spec.name, z.reason());
    }
    f.zygote.reset();
    ++f.zygote_failures;
    const double backoff = std::min(
        10.0, config_.restart_backoff_s * std::pow(2.0, std::max(0, int(f.zygote_failures) - 2)));
    // A first death restarts it at once; a zygote that keeps dying backs off like instances.
    f.zygote_retry_ns = now + (f.zygote_failures > 1 ? static_cast<uint64_t>(backoff * 1e9) : 0);
  }
  if (!f.zygote_unforkable.empty() || now < f.zygote_retry_ns) return;

  auto retry_later = [&](const std::string& why) {
    if (why != f.zygote_error) {
      spdlog::error("function {}: cannot start its zygote: {}", spec.name, why);
    }
    f.zygote_error = why;
    ++f.zygote_failures;
    f.zygote_retry_ns =
        now +
        static_cast<uint64_t>(
            std::min(10.0, config_.restart_backoff_s * std::pow(2.0, f.zygote_failures)) * 1e9);
  };
  constexpr int kLibraryFd = 4;
  UniqueFd library;
  if (!spec.handler.library.empty()) {
    auto fd = OpenHandlerLibrary(spec.handler.library, handler_dirs_);
    if (!fd.ok()) return retry_later("spec.handler.library: " + fd.status().message());
    library = std::move(*fd);
  }
  if (!f.seccomp) {
    auto prog = SeccompProgram::Compile(spec.security.seccomp_allow);
    if (!prog.ok()) return retry_later("spec.security.seccomp.allow: " + prog.status().message());
    f.seccomp.emplace(std::move(*prog));
  }
  const std::string handler =
      spec.handler.builtin.empty()
          ? "library:/proc/self/fd/" + std::to_string(kLibraryFd) + ":" + spec.handler.symbol
          : "builtin:" + spec.handler.builtin;
  SpawnOptions opts;
  opts.file = fn_binary_;
  opts.env = InstanceEnv(spec, handler);
  if (library.valid()) opts.fds.emplace_back(kLibraryFd, library.get());
  SandboxOptions sandbox;
  sandbox.switch_ids = switch_ids_;
  if (switch_ids_) {
    auto id = tenant_ids_->For(spec.tenant);
    if (!id.ok()) return retry_later(id.status().message());
    sandbox.ids = *id;
  }
  sandbox.seccomp = &*f.seccomp;
  // Its own cgroup with the function's limits; each forked child is moved out into its own.
  std::unique_ptr<InstanceCgroup> cgroup;
  if (cgroups_) {
    char name[96];
    std::snprintf(name, sizeof name, "%s-g%llu-zygote%u", spec.name.c_str(),
                  static_cast<unsigned long long>(spec.generation), f.zygote_count);
    auto cg = cgroups_->Create(name, {spec.cpu, spec.memory_bytes, config_.instance_pids_max});
    if (cg.ok()) cgroup = std::move(*cg);
  }
  // Its own log lines go to the function's log, beside its instances'.
  UniqueFd log(open(LogPath(spec.name).c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640));
  if (!log.valid()) return retry_later(ErrnoStatus("open " + LogPath(spec.name), errno).message());
  f.zygote_started_ns = MonotonicNs();
  auto z = Zygote::Start(std::move(opts), sandbox, log.get(), std::move(cgroup), &zygote_exits_);
  if (!z.ok()) return retry_later(z.status().message());
  f.zygote = std::move(*z);
  f.zygote_logged = Zygote::State::kStarting;
  ++f.zygote_count;
  spdlog::info("function {}: zygote started (pid {}, tenant {}{})", spec.name, f.zygote->pid(),
               spec.tenant,
               switch_ids_ ? ", uid " + std::to_string(sandbox.ids.uid) : std::string());
}

InstanceManager::FunctionState::Spare::~Spare() {
  // Unstarted (a started one's pidfd has moved to its instance): it goes, and its cgroup after.
  if (pidfd.valid()) (void)syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
}

std::unique_ptr<InstanceCgroup> InstanceManager::NewInstanceCgroup(const FunctionSpec& spec,
                                                                   const std::string& name) {
  if (!cgroups_) return nullptr;
  auto cg = cgroups_->Create(name, {spec.cpu, spec.memory_bytes, config_.instance_pids_max});
  if (!cg.ok()) {
    spdlog::warn("function {}: instance runs without its cgroup: {}", spec.name,
                 cg.status().ToString());
    return nullptr;
  }
  return std::move(*cg);
}

// Moves `pid` into `cgroup` (every hierarchy).
static Status MoveInto(const InstanceCgroup& cgroup, pid_t pid) {
  const std::string text = std::to_string(pid);
  for (const auto& fd : cgroup.procs()) {
    if (write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return ErrnoStatus("moving the forked instance into its cgroup", errno);
    }
  }
  return {};
}

Status InstanceManager::ForkFromZygote(FunctionState& f, Instance& inst, int out_fd, int err_fd,
                                       std::unique_ptr<InstanceCgroup>* cgroup,
                                       const std::string& cgroup_name, ChildProcess* child_out,
                                       bool* refuse) {
  const FunctionSpec& spec = f.rt->spec;
  *refuse = false;
  if (!f.zygote_unforkable.empty()) {
    return Unavailable("zygote cannot fork: " + f.zygote_unforkable);
  }
  if (!f.zygote) {
    if (!f.zygote_error.empty()) {
      *refuse = true;
      return Unavailable(f.zygote_error);
    }
    return Unavailable("no zygote running");
  }
  Zygote& z = *f.zygote;
  const Zygote::State state = z.WaitLoaded(static_cast<int>(config_.zygote_timeout_ms));
  if (state == Zygote::State::kFailed) {
    f.zygote_error = LoadFailure(spec, z.reason());
    *refuse = true;
    return Unavailable(f.zygote_error);
  }
  if (state == Zygote::State::kStarting) {
    return Unavailable("zygote still loading after " + std::to_string(config_.zygote_timeout_ms) +
                       " ms");
  }
  if (state != Zygote::State::kReady) return Unavailable("zygote " + z.reason());
  // The spare if it is this zygote's and alive, else a child forked now.
  bool spare = false;
  if (f.spare && f.spare->zygote_id == f.zygote_count) {
    pollfd exited{f.spare->pidfd.get(), POLLIN, 0};  // readable once it has exited
    spare = poll(&exited, 1, 0) == 0;
  }
  if (!spare) {
    f.spare.reset();
    if (Status st = ForkSpare(f); !st.ok()) return st;
  }
  FunctionState::Spare child = std::move(*f.spare);
  f.spare.reset();
  inst.forked_ns = MonotonicNs();
  inst.prefork = spare;
  const pid_t pid = child.child.pid;
  // In the instance's cgroup before it runs (the tenant cannot write cgroup.procs): the
  // spare's own, where it was moved when forked, else moved now. On an error the child is
  // dropped: killed, and its start socket closed.
  if (child.cgroup) {
    *cgroup = std::move(child.cgroup);
  } else {
    if (!*cgroup) *cgroup = NewInstanceCgroup(f.rt->spec, cgroup_name);
    if (*cgroup) SHOAL_RETURN_IF_ERROR(MoveInto(**cgroup, pid));
  }
  if (Status st =
          Zygote::Start(child.child, inst.key, inst.slot, inst.endpoint.fd(), out_fd, err_fd);
      !st.ok()) {
    return Unavailable("starting the forked instance: " + st.message());
  }
  inst.released_ns = MonotonicNs();
  inst.zygote_id = child.zygote_id;
  inst.zygote_pid = child.zygote_pid;
  inst.lifeline = std::move(child.child.start);
  *child_out = ChildProcess(pid, std::move(child.pidfd));
  return {};
}

Status InstanceManager::ForkSpare(FunctionState& f) {
  Zygote& z = *f.zygote;
  auto forked = z.Fork(static_cast<int>(config_.zygote_timeout_ms));
  if (!forked.ok()) {
    if (z.state() == Zygote::State::kGone) {
      spdlog::warn("function {}: {}; restarting it", f.rt->spec.name, z.reason());
      f.zygote.reset();
      ++f.zygote_failures;
      f.zygote_retry_ns = 0;
    }
    return forked.status();
  }
  const pid_t pid = forked->pid;
  for (const auto& [key, other] : by_key_) {
    if (other->pid == pid) {
      return Internal("zygote reported pid " + std::to_string(pid) + ", which is instance " +
                      std::to_string(key));
    }
  }
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) return ErrnoStatus("pidfd_open", errno);
  FunctionState::Spare spare(std::move(*forked), std::move(pidfd), f.zygote_count, z.pid());
  if (cgroups_) {
    char name[96];
    std::snprintf(name, sizeof name, "%s-s%x", f.rt->spec.name.c_str(), ++spare_cgroups_);
    spare.cgroup = NewInstanceCgroup(f.rt->spec, name);
    if (spare.cgroup) {
      if (Status st = MoveInto(*spare.cgroup, pid); !st.ok()) {
        // It stays in the zygote's cgroup and is moved when it starts.
        spdlog::warn("function {}: spare (pid {}): {}", f.rt->spec.name, pid, st.ToString());
        spare.cgroup.reset();
      }
    }
  }
  f.spare.emplace(std::move(spare));
  return {};
}

int InstanceManager::ZygoteExitStatus(Instance& inst, int* status) {
  std::lock_guard lock(mu_);
  auto take = [&] {
    // Only its own zygote's report counts (another zygote runs another function's code).
    auto it = zygote_exits_.find({inst.zygote_pid, inst.pid});
    if (it == zygote_exits_.end()) return false;
    *status = it->second;
    zygote_exits_.erase(it);
    return true;
  };
  if (take()) return 1;
  Zygote* z = inst.fn->zygote.get();
  if (z != nullptr && inst.zygote_id == inst.fn->zygote_count &&
      z->state() == Zygote::State::kReady) {
    // Its zygote reaps it at once; a zygote that does not report is killed, which hands its
    // children to shoald.
    constexpr int kReportWaitMs = 200;
    z->CollectExit(inst.pid, kReportWaitMs);
    if (take()) return 1;
  }
  // Its zygote is gone: re-parented to shoald, it is reaped here.
  int st = 0;
  const pid_t r = waitpid(inst.pid, &st, WNOHANG);
  if (r == inst.pid) {
    *status = st;
    return 1;
  }
  if (r < 0 && errno == ECHILD) {
    spdlog::warn(
        "function {}: instance {:#x} (pid {}) exited; its exit status is unknown (its "
        "zygote reaped it and died before reporting it)",
        inst.fn->rt->spec.name, inst.key, inst.pid);
    return -1;
  }
  return 0;
}

}  // namespace shoal
