#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

using instance_manager_internal::SelfDir;

InstanceManager::InstanceManager(const NodeConfig& config, uv_loop_t* loop, DataPlane& dataplane,
                                 FunctionTable& functions, NodeMetrics& metrics, SpecSource specs)
    : config_(config),
      loop_(loop),
      dataplane_(dataplane),
      functions_(functions),
      metrics_(metrics),
      specs_(std::move(specs)) {
  fn_binary_ = config.fn_binary.empty() ? SelfDir() + "/shoal-fn" : config.fn_binary;
  const Resources capacity = ProbeNodeCapacity();
  cluster_.AddNode(config.node_name, capacity, 0);
  spdlog::info("placement: node {} has {} cores, {:.0f} MiB memory, {} GPU(s)", config.node_name,
               capacity.cores, capacity.memory_mb, capacity.gpus);
}

InstanceManager::~InstanceManager() = default;

Status InstanceManager::Start(RequestSink* sink) {
  sink_ = sink;
  if (access(fn_binary_.c_str(), X_OK) != 0) {
    return NotFound("function instance binary not found: " + fn_binary_);
  }
  SHOAL_RETURN_IF_ERROR(StartSandbox());
  if (config_.instance_start == InstanceStart::kZygote) {
    // A zygote is the parent of its instances and reports their exits; when it dies they are
    // re-parented to shoald, which reaps them as it reaps a spawned instance.
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
      return ErrnoStatus("prctl(PR_SET_CHILD_SUBREAPER)", errno);
    }
    spdlog::info(
        "instance manager: instances start forked from their function's zygote "
        "(instance_start: zygote; a zygote per function, never shared across tenants)");
  } else {
    spdlog::info("instance manager: instances start as new processes (instance_start: spawn)");
  }
  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir + "/logs", ec);
  auto ep = dataplane_.CreateEndpoint(kManagerEndpoint);
  if (!ep.ok()) return ep.status();
  manager_endpoint_ = std::move(*ep);
  manager_channel_ = OpenChannel(dup(manager_endpoint_.fd()), dataplane_.kind(), config_.node_name);
  uv_poll_init(loop_, &manager_poll_, manager_channel_->fd());
  manager_poll_.data = this;
  uv_poll_start(&manager_poll_, UV_READABLE, [](uv_poll_t* h, int, int) {
    static_cast<InstanceManager*>(h->data)->OnManagerReadable();
  });
  uv_async_init(loop_, &poke_,
                [](uv_async_t* a) { static_cast<InstanceManager*>(a->data)->Reconcile(); });
  poke_.data = this;
  uv_async_init(loop_, &commit_notices_,
                [](uv_async_t* a) { static_cast<InstanceManager*>(a->data)->SendCommitNotices(); });
  commit_notices_.data = this;
  uv_timer_init(loop_, &tick_);
  tick_.data = this;
  uv_timer_start(
      &tick_, [](uv_timer_t* t) { static_cast<InstanceManager*>(t->data)->Reconcile(); }, 0,
      config_.control_interval_ms);
  started_ = true;
  {
    // The functions restored from the state dir get their routes now, not at the first tick:
    // shoald says ready (and /readyz answers 200) only once every one of them is routable.
    std::lock_guard lock(mu_);
    specs_changed_ = false;
    SyncSpecs();
  }
  spdlog::info("instance manager: instances run {} (control interval {} ms)", fn_binary_,
               config_.control_interval_ms);
  return {};
}

void InstanceManager::Poke() {
  if (started_) uv_async_send(&poke_);
}

void InstanceManager::FunctionsChanged() {
  // Apply the change to the routing table before the caller answers its client: a function is
  // invocable as soon as its deploy returns, and gone as soon as its delete does. Starting and
  // stopping instances happens on the manager's loop.
  {
    std::lock_guard lock(mu_);
    if (started_ && !stopping_) {
      specs_changed_ = false;
      SyncSpecs();
    } else {
      specs_changed_ = true;
    }
  }
  Poke();
}

std::string InstanceManager::DataPlaneMode() { return DataPlaneKindName(dataplane_.kind()); }

std::string InstanceManager::LogPath(const std::string& function) const {
  return config_.state_dir + "/logs/" + function + ".log";
}

Status InstanceManager::StartSandbox() {
  handler_dirs_ = ResolveHandlerDirs(config_.handler_dirs);
  std::string dirs;
  for (const auto& d : handler_dirs_) dirs += (dirs.empty() ? "" : ", ") + d;
  spdlog::info("sandbox: handler libraries only from {}", dirs.empty() ? "(none)" : dirs);
  auto ids = TenantIds::Open(config_);
  if (!ids.ok()) return ids.status();
  tenant_ids_ = std::make_unique<TenantIds>(std::move(*ids));
  switch_ids_ = geteuid() == 0;
  auto choice =
      ChoosePoolBackend(config_.pool, config_.pool_bytes, PoolSegmentName(config_.node_name, ""));
  if (!choice.ok()) return choice.status();
  pool_choice_ = *choice;
  spdlog::info("pool: backend {} ({})", PoolBackendName(pool_choice_.backend), pool_choice_.reason);
  if (switch_ids_) {
    spdlog::info(
        "sandbox: instances run as their tenant's uid/gid ({} tenant(s) fixed in the "
        "config, others from uid {} up, kept in {}/tenants.yaml), no capabilities, "
        "no_new_privs, seccomp ({} syscalls denied)",
        config_.tenants.size(), config_.tenant_uid_base, config_.state_dir,
        DeniedSyscalls().size());
  } else {
    spdlog::warn(
        "sandbox: shoald is not root (uid {}): instances run as uid {} like shoald, "
        "not as their tenant's uid (still without capabilities, with no_new_privs and "
        "seccomp)",
        geteuid(), geteuid());
  }
  auto cg = OpenCgroups(config_.cgroups, config_.cgroup_parent, config_.node_name);
  if (cg.ok()) {
    cgroups_ = std::move(*cg);
    spdlog::info("sandbox: instance cgroups: {}", cgroups_->Describe());
  } else {
    spdlog::warn("sandbox: instances run without cgroups (no cpu/memory limits): {}",
                 cg.status().message());
  }
  return {};
}

Result<SharedPool*> InstanceManager::TenantPool(const std::string& tenant) {
  std::lock_guard lock(mu_);
  return PoolFor(tenant);
}

Result<SharedPool*> InstanceManager::PoolFor(const std::string& tenant) {
  auto it = pools_.find(tenant);
  if (it != pools_.end()) return it->second.get();
  const std::string name = PoolSegmentName(config_.node_name, tenant);
  // A pool left by a shoald that was killed is taken over: the FL coordinator's held updates
  // (acknowledged, not yet committed) survive the restart; everything else is reclaimed.
  bool recovered = false;
  std::string reason = pool_choice_.reason;
  PoolBackend backend = pool_choice_.backend;
  if (config_.pool == "auto") {
    // Under auto a tenant's pool may sit on the other backend (a fallback of the shoald before
    // this one): take it over there rather than lose what it holds.
    const PoolBackend other =
        backend == PoolBackend::kDpdk ? PoolBackend::kBoost : PoolBackend::kDpdk;
    if (!PoolFileExists(backend, name) && PoolFileExists(other, name)) {
      backend = other;
      reason = "auto: taking over the " + std::string(PoolBackendName(other)) +
               " pool a previous shoald left";
    }
  }
  auto pool = CreateOrRecoverPool(backend, name, config_.pool_bytes, kCoordinatorSlot, &recovered);
  if (!pool.ok() && pool.status().code() != StatusCode::kPermissionDenied &&
      backend == PoolBackend::kDpdk && config_.pool == "auto") {
    // Hugepages ran out for this tenant (others took them): auto falls back for this one. Not
    // for a pool left that shoald may not open: what it holds is the tenant's.
    reason = "auto: dpdk failed for this tenant: " + pool.status().message();
    spdlog::warn("pool: tenant '{}': {}; using boost", tenant, reason);
    pool = CreateOrRecoverPool(PoolBackend::kBoost, name, config_.pool_bytes, kCoordinatorSlot,
                               &recovered);
  }
  if (!pool.ok()) {
    spdlog::error("pool: tenant '{}': {}", tenant, pool.status().ToString());
    return pool.status();
  }
  std::string owner = "shoald's uid";
  if (switch_ids_ && tenant_ids_) {
    // Only the tenant's instances may open it; shoald (root) keeps its mapping.
    auto id = tenant_ids_->For(tenant);
    if (!id.ok()) return id.status();
    SHOAL_RETURN_IF_ERROR((*pool)->SetOwner(id->uid, id->gid));
    owner = "uid " + std::to_string(id->uid) + ", gid " + std::to_string(id->gid);
  }
  spdlog::info("pool: {} {} {} ({} MiB, mode 0600, {}) for tenant '{}'",
               recovered ? "recovered" : "created", PoolBackendName((*pool)->backend()),
               (*pool)->Path(), config_.pool_bytes >> 20, owner, tenant);
  if (config_.pool_prefault && (*pool)->backend() == PoolBackend::kBoost) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = PrefaultPool(**pool); !st.ok()) {
      if (!recovered) {
        // A new pool /dev/shm cannot hold: refused now, not a failed write later.
        spdlog::error("pool: tenant '{}': {}", tenant, st.ToString());
        return st;
      }
      // A pool taken over keeps what it holds, whatever its pages.
      spdlog::warn("pool: tenant '{}': kept without pre-faulting: {}", tenant, st.ToString());
    } else {
      pool_prefaulted_[tenant] = true;
      spdlog::info(
          "pool: tenant '{}': {} MiB pre-faulted in {:.0f} ms (pool_prefault)", tenant,
          (*pool)->mapped_size() >> 20,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (!pool_prefaulted_.contains(tenant) && config_.pool_warm_bytes > 0 &&
      (*pool)->backend() == PoolBackend::kBoost) {
    const uint64_t window = std::min(config_.pool_warm_bytes, config_.pool_bytes);
    if (Status st = (*pool)->StartWarmAhead(window); st.ok()) {
      spdlog::info(
          "pool: tenant '{}': keeping {} MiB warm ahead of its allocations "
          "(pool_warm_bytes)",
          tenant, window >> 20);
    } else {
      spdlog::warn("pool: tenant '{}': not warmed ahead: {}", tenant, st.ToString());
    }
  }
  pool_reasons_[tenant] = reason;
  SharedPool* raw = pool->get();
  pools_[tenant] = std::move(*pool);
  return raw;
}

void InstanceManager::Stop(double grace_s) {
  if (!started_) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto* list : {&by_name_}) {
      for (auto& [name, f] : *list) {
        for (Instance* inst : f->instances) StopInstance(*inst);
      }
    }
    for (auto& f : retired_) {
      for (Instance* inst : f->instances) StopInstance(*inst);
    }
    for (auto& [name, f] : by_name_) {
      f->spare.reset();
      f->zygote.reset();
    }
  }
  const uint64_t deadline = MonotonicNs() + static_cast<uint64_t>(grace_s * 1e9);
  while (!by_key_.empty() && MonotonicNs() < deadline) uv_run(loop_, UV_RUN_NOWAIT), usleep(1000);
  for (auto& [key, inst] : by_key_) inst->child.Signal(SIGKILL);
  while (!by_key_.empty()) uv_run(loop_, UV_RUN_ONCE);
  uv_timer_stop(&tick_);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&poke_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&commit_notices_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&manager_poll_), nullptr);
  uv_run(loop_, UV_RUN_NOWAIT);
  dataplane_.RemoveEndpoint(kManagerEndpoint);
  started_ = false;
}

}  // namespace shoal
