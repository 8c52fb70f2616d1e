#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

// ---- instances ------------------------------------------------------------------------------

bool InstanceManager::PlaceStart(FunctionState& f) {
  const FunctionSpec& spec = f.rt->spec;
  NodeState& node = cluster_.node(0);
  // Idle warm instances of the other functions, for the model's truth. This function's own
  // idle instances are left out: the manager only asks for a start when its ready and starting
  // instances (idle ones included) fall short of its target, so the request is for a new one.
  node.idle_warm.clear();
  for (const auto& [name, other] : by_name_) {
    if (other.get() == &f) continue;
    uint32_t idle = 0;
    for (Instance* inst : other->instances) {
      if (inst->state == Instance::State::kReady && other->rt->router.Inflight(inst->key) == 0) {
        ++idle;
      }
    }
    if (idle > 0) node.idle_warm[name] = idle;
  }
  const Resources want = SpecResources(spec);
  auto placed = Place(cluster_, {spec.name, want});
  std::string reason;
  if (!placed.ok()) {
    reason = ShortResource(node, want);
    if (reason.empty()) reason = placed.status().message();
  }
  if (reason.empty()) {
    spdlog::debug("function {}: placement {} on {} (expected cold start {:.3f} s)", spec.name,
                  PlacementKindName(placed->kind), node.name, placed->expected_cold_start_s);
    metrics_.placement_decisions
        .Add({{"function", spec.name}, {"kind", PlacementKindName(placed->kind)}})
        .Increment();
    if (!f.unschedulable.empty()) {
      spdlog::info("function {}: schedulable again ({} no longer short)", spec.name,
                   f.unschedulable);
      f.unschedulable.clear();
    }
    return true;
  }
  metrics_.placement_decisions.Add({{"function", spec.name}, {"kind", "unschedulable"}})
      .Increment();
  if (reason != f.unschedulable) {
    spdlog::warn("function {}: unschedulable: {}", spec.name, reason);
    f.unschedulable = reason;
  }
  // Nothing will start for them: answer now rather than let them wait for their timeout.
  for (const auto& w : f.rt->router.TakeWaiters()) {
    sink_->Reject(w.loop, w.request_id, 503,
                  "function '" + spec.name + "' is unschedulable: " + reason);
  }
  return false;
}

std::vector<std::string> InstanceManager::InstanceEnv(const FunctionSpec& spec,
                                                      const std::string& handler) {
  std::vector<std::string> env = {
      "SHOAL_FUNCTION=" + spec.name,
      "SHOAL_FUNCTION_ID=" + std::to_string(spec.id),
      "SHOAL_NODE=" + config_.node_name,
      "SHOAL_DATAPLANE=" + std::string(DataPlaneKindName(dataplane_.kind())),
      "SHOAL_POOL=" + PoolSegmentName(config_.node_name, spec.tenant),
      "SHOAL_POOL_BACKEND=" + std::string(PoolBackendName(pools_.contains(spec.tenant)
                                                              ? pools_.at(spec.tenant)->backend()
                                                              : pool_choice_.backend)),
      "SHOAL_HANDLER=" + handler,
      "SHOAL_CONCURRENCY=" + std::to_string(spec.concurrency),
      "SHOAL_LOG_LEVEL=" + config_.log_level,
      "SHOAL_GATEWAY=" + gateway_url_,
      std::string("PATH=") + (getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin"),
  };
  if (pool_prefaulted_.contains(spec.tenant)) {
    // Every page of the pool is allocated: the instance installs its own page-table entries
    // for it once (a fork does not copy a shared mapping's), not one fault per 4 KiB it touches.
    env.push_back("SHOAL_POOL_POPULATE=1");
  }
  if (instance_token_) {
    if (std::string token = instance_token_(spec); !token.empty()) {
      env.push_back("SHOAL_TOKEN=" + token);
    }
  }
  const size_t own_env = env.size();
  for (const auto& [k, v] : spec.handler.env) {
    // Never a variable that loads code (the manifest parser refuses them; records written
    // before it did are filtered here), nor one of shoald's own.
    bool ours = false;
    for (size_t i = 0; i < own_env; ++i) ours = ours || env[i].rfind(k + "=", 0) == 0;
    if (ours || !CodeLoadingEnvReason(k).empty()) {
      spdlog::warn("function {}: not passing spec.handler.env.{} to its instances", spec.name, k);
      continue;
    }
    env.push_back(k + "=" + v);
  }

  return env;
}

Status InstanceManager::Spawn(FunctionState& f, bool prewarm) {
  const uint64_t begin_ns = MonotonicNs();
  const FunctionSpec& spec = f.rt->spec;
  uint64_t& used = used_slots_[spec.tenant];
  HolderSlot slot = 0;
  for (HolderSlot s = 1; s < kMaxHolderSlots; ++s) {
    if ((used & (1ull << s)) == 0) {
      slot = s;
      break;
    }
  }
  if (slot == 0) return ResourceExhausted("tenant '" + spec.tenant + "' has no free pool slot");
  const uint32_t key = InstanceKey(next_sequence_++, slot);
  auto ep = dataplane_.CreateEndpoint(key);
  if (!ep.ok()) return ep.status();

  auto inst = std::make_unique<Instance>();
  inst->mgr = this;
  inst->fn = &f;
  inst->key = key;
  inst->slot = slot;
  inst->tenant = spec.tenant;
  inst->prewarmed = prewarm;
  inst->endpoint = std::move(*ep);

  // The handler library, opened now below its handler directory without following any
  // symlink: the instance loads this very file through the descriptor (/proc/self/fd/4), so
  // nothing swapped in since the deploy is ever loaded.
  constexpr int kLibraryFd = 4;
  UniqueFd library;
  if (!spec.handler.library.empty()) {
    auto fd = OpenHandlerLibrary(spec.handler.library, handler_dirs_);
    if (!fd.ok()) {
      dataplane_.RemoveEndpoint(key);
      return PermissionDenied("spec.handler.library: " + fd.status().message());
    }
    library = std::move(*fd);
  }
  if (!f.seccomp) {
    auto prog = SeccompProgram::Compile(spec.security.seccomp_allow);
    if (!prog.ok()) {
      dataplane_.RemoveEndpoint(key);
      return InvalidArgument("spec.security.seccomp.allow: " + prog.status().message());
    }
    f.seccomp.emplace(std::move(*prog));
  }

  std::string handler =
      spec.handler.builtin.empty()
          ? "library:/proc/self/fd/" + std::to_string(kLibraryFd) + ":" + spec.handler.symbol
          : "builtin:" + spec.handler.builtin;
  std::vector<std::string> env = InstanceEnv(spec, handler);
  env.push_back("SHOAL_ENDPOINT=" + std::to_string(key));
  env.push_back("SHOAL_SLOT=" + std::to_string(slot));

  // Its cgroup, with the manifest's limits; without one it still runs (logged at start-up).
  // A spare forked from the zygote brings its own; otherwise it is made here.
  char cgroup_name[96];
  std::snprintf(cgroup_name, sizeof cgroup_name, "%s-%x", spec.name.c_str(), key);
  const bool zygote = config_.instance_start == InstanceStart::kZygote;
  std::unique_ptr<InstanceCgroup> cgroup;
  if (!zygote || !f.spare || !f.spare->cgroup) cgroup = NewInstanceCgroup(spec, cgroup_name);

  SandboxOptions sandbox;
  sandbox.switch_ids = switch_ids_;
  if (switch_ids_) {
    auto id = tenant_ids_->For(spec.tenant);
    if (!id.ok()) {
      dataplane_.RemoveEndpoint(key);
      return id.status();
    }
    sandbox.ids = *id;
  }
  sandbox.seccomp = &*f.seccomp;

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    dataplane_.RemoveEndpoint(key);
    return ErrnoStatus("pipe2", errno);
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    dataplane_.RemoveEndpoint(key);
    return ErrnoStatus("pipe2", err);
  }
  SpawnOptions opts;
  opts.file = fn_binary_;
  opts.env = std::move(env);
  opts.fds = {{1, out_pipe[1]}, {2, err_pipe[1]}, {3, inst->endpoint.fd()}};
  if (library.valid()) opts.fds.emplace_back(kLibraryFd, library.get());

  Instance* raw = inst.get();
  raw->spawn_ns = MonotonicNs();
  raw->prepare_ns = raw->spawn_ns - begin_ns;
  raw->last_busy_ns = raw->spawn_ns;
  Result<ChildProcess> child = Internal("not started");
  bool started = false;
  if (zygote) {
    ChildProcess forked;
    bool refuse = false;
    Status st =
        ForkFromZygote(f, *raw, out_pipe[1], err_pipe[1], &cgroup, cgroup_name, &forked, &refuse);
    if (st.ok()) {
      child = std::move(forked);
      started = true;
      raw->start_path = "zygote";
    } else if (refuse) {
      // The handler does not load: a spawned instance would fail the same way.
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
      dataplane_.RemoveEndpoint(key);
      return st;
    } else {
      raw->start_note = st.message();
    }
  }
  if (!started) {
    if (!cgroup) cgroup = NewInstanceCgroup(spec, cgroup_name);
    sandbox.cgroup = cgroup.get();
    child = SpawnSandboxed(opts, sandbox);
  }
  // The child has its copies of the endpoint socket and the pipes' write ends; shoald keeps
  // only the anchor and the read ends.
  close(raw->endpoint.ReleaseFd());
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (!child.ok()) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    dataplane_.RemoveEndpoint(key);
    return child.status();
  }
  raw->child = std::move(*child);
  raw->cgroup = std::move(cgroup);
  uv_pipe_init(loop_, &raw->out, 0);
  uv_pipe_init(loop_, &raw->err, 0);
  uv_pipe_open(&raw->out, out_pipe[0]);
  uv_pipe_open(&raw->err, err_pipe[0]);
  raw->out.data = raw;
  raw->err.data = raw;
  uv_poll_init(loop_, &raw->exit_poll, raw->child.pidfd());
  raw->exit_poll.data = raw;
  uv_poll_start(&raw->exit_poll, UV_READABLE, [](uv_poll_t* h, int, int) {
    auto* i = static_cast<Instance*>(h->data);
    int status = 0;
    if (!i->child.TryReap(&status)) {
      if (i->start_path != "zygote") return;
      const int got = i->mgr->ZygoteExitStatus(*i, &status);
      if (got == 0) return;
      i->child.MarkReaped();
      if (got < 0) {
        uv_poll_stop(h);
        i->mgr->OnExit(i, -1, 0);
        return;
      }
    }
    uv_poll_stop(h);
    if (WIFSIGNALED(status)) {
      i->mgr->OnExit(i, 0, WTERMSIG(status));
    } else {
      i->mgr->OnExit(i, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
    }
  });
  raw->open_handles = 3;
  raw->pid = raw->child.pid();
  used |= 1ull << slot;
  auto on_alloc = [](uv_handle_t* h, size_t, uv_buf_t* b) {
    auto* i = static_cast<Instance*>(h->data);
    *b = uv_buf_init(i->read_buf, sizeof i->read_buf);
  };
  auto on_read = [](uv_stream_t* s, ssize_t n, const uv_buf_t* b) {
    auto* i = static_cast<Instance*>(s->data);
    if (n > 0) i->mgr->AppendLog(*i, b->base, static_cast<size_t>(n));
    if (n < 0) uv_read_stop(s);
  };
  uv_read_start(reinterpret_cast<uv_stream_t*>(&raw->out), on_alloc, on_read);
  uv_read_start(reinterpret_cast<uv_stream_t*>(&raw->err), on_alloc, on_read);
  by_key_[key] = raw;
  // PlaceStart() checked that it fits; the reservation is released when the instance exits.
  raw->reserved = SpecResources(spec);
  raw->holds_reservation = cluster_.Allocate(0, raw->reserved).ok();
  cluster_.node(0).cached.insert(spec.name);
  f.instances.push_back(inst.release());
  if (prewarm) {
    ++f.prewarm_starts;
    metrics_.autoscaler_prewarm_starts.Add({{"function", spec.name}}).Increment();
  }
  spdlog::info("function {}: started instance {:#x} (pid {}, slot {}){}", spec.name, key, raw->pid,
               slot, prewarm ? ", pre-warm" : "");
  return {};
}

}  // namespace shoal
