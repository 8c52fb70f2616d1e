#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

void InstanceManager::ReapStrays() {
  // Only processes of a tenant (an instance's leftovers): never one of shoald's own uid, which
  // may be a child its embedder waits for.
  if (!switch_ids_) return;
  for (int i = 0; i < 16; ++i) {
    siginfo_t si{};
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return;
    bool known = false;
    for (const auto& [key, inst] : by_key_) known = known || inst->pid == si.si_pid;
    for (const auto& [name, f] : by_name_) {
      known = known || (f->zygote && f->zygote->pid() == si.si_pid);
    }
    for (const auto& f : retired_) known = known || (f->zygote && f->zygote->pid() == si.si_pid);
    if (known || si.si_uid == geteuid()) return;  // its owner reaps it
    int status = 0;
    waitpid(si.si_pid, &status, WNOHANG);
    spdlog::info("reaped pid {} (uid {}), left behind by an instance", si.si_pid, si.si_uid);
  }
}

void InstanceManager::AppendLog(Instance& inst, const char* data, size_t len) {
  std::ofstream& log = inst.fn->log;
  if (!log.is_open()) return;
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "[%x] ", inst.key);
  for (size_t i = 0; i < len; ++i) {
    if (inst.out_at_line_start) log << prefix;
    log.put(data[i]);
    inst.out_at_line_start = data[i] == '\n';
  }
  log.flush();
}

void InstanceManager::StopInstance(Instance& inst) {
  if (inst.state == Instance::State::kStopping || inst.exited) return;
  const bool quarantined = inst.state == Instance::State::kQuarantined;
  inst.state = Instance::State::kStopping;
  inst.expected_exit = true;
  if (quarantined) {
    // Kept frozen for inspection until now: thawed only to be killed (it is not trusted to
    // shut down cleanly, and a frozen v1 task would not take the signal).
    if (inst.frozen) {
      if (Status st = inst.frozen->Thaw(); !st.ok()) {
        spdlog::warn("function {}: quarantined instance {:#x}: {}", inst.fn->rt->spec.name,
                     inst.key, st.ToString());
      }
    }
    inst.child.Signal(SIGKILL);
    return;
  }
  if (const int err = inst.child.Signal(SIGTERM); err != 0) {
    // EPERM: shoald lacks CAP_KILL for an instance under its tenant's uid.
    spdlog::error("function {}: stopping instance {:#x} (pid {}): SIGTERM: {}",
                  inst.fn->rt->spec.name, inst.key, inst.pid, std::strerror(-err));
  }
}

void InstanceManager::OnLoadReport(uint32_t key, const LoadReport& report) {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) it->second->load = report;
}

LoadReport InstanceManager::LoadOf(const FunctionState& f) {
  LoadReport sum;
  for (const Instance* inst : f.instances) {
    if (inst->state != Instance::State::kReady && inst->state != Instance::State::kDraining)
      continue;
    sum.tokens_in_flight += inst->load.tokens_in_flight;
    sum.running += inst->load.running;
    sum.queued += inst->load.queued;
  }
  return sum;
}

void InstanceManager::OnReady(uint32_t key) {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  Instance& inst = *it->second;
  if (inst.state != Instance::State::kStarting) return;
  inst.state = Instance::State::kReady;
  inst.ready_ns = MonotonicNs();
  inst.last_busy_ns = inst.ready_ns;
  inst.cold_start_ms = (inst.ready_ns - inst.spawn_ns) / 1e6;
  cold_start_sum_s_ += inst.cold_start_ms / 1e3;
  ++cold_start_count_;
  cluster_.node(0).cold_start_cost_s = cold_start_sum_s_ / static_cast<double>(cold_start_count_);
  FunctionRuntime& rt = *inst.fn->rt;
  rt.metrics.CountColdStart(inst.cold_start_ms / 1e3);
  metrics_.CountInstanceStart(rt.spec.name, inst.start_path, inst.cold_start_ms / 1e3);
  rt.cold_starts.fetch_add(1, std::memory_order_relaxed);
  rt.last_cold_start_us.store(static_cast<uint64_t>(inst.cold_start_ms * 1e3),
                              std::memory_order_relaxed);
  ++inst.fn->iv_cold;
  inst.fn->iv_cold_s += inst.cold_start_ms / 1e3;
  inst.fn->last_cold_s = inst.cold_start_ms / 1e3;
  inst.fn->crashes = 0;
  auto assigned = rt.router.AddInstance(key, std::max<uint32_t>(1, rt.spec.concurrency));
  inst.fn->cold_requests += assigned.size();
  if (!assigned.empty()) {
    metrics_.autoscaler_cold_requests.Add({{"function", rt.spec.name}})
        .Increment(static_cast<double>(assigned.size()));
  }
  for (const auto& a : assigned) sink_->Deliver(a);
  if (observer_ != nullptr && inst.cgroup && cgroups_) {
    observer_->InstanceReady(
        {&rt.spec, inst.fn->rt, key, inst.pid, cgroups_->version(), inst.cgroup->dirs()});
  }
  std::string path = inst.start_path;
  char parts[192];
  if (inst.start_path == "zygote") {
    std::snprintf(parts, sizeof parts,
                  ": %s %.2f ms, cgroup and release %.2f ms, to ready %.2f ms; before it: "
                  "endpoint, cgroup and pipes %.2f ms",
                  inst.prefork ? "spare" : "fork", (inst.forked_ns - inst.spawn_ns) / 1e6,
                  (inst.released_ns - inst.forked_ns) / 1e6,
                  (inst.ready_ns - inst.released_ns) / 1e6, inst.prepare_ns / 1e6);
  } else {
    std::snprintf(parts, sizeof parts, "; before it: endpoint, cgroup and pipes %.2f ms",
                  inst.prepare_ns / 1e6);
  }
  path += parts;
  if (!inst.start_note.empty()) path += " (" + inst.start_note + ")";
  spdlog::info(
      "function {}: instance {:#x} ready in {:.2f} ms (cold start, {}), took {} queued "
      "request(s)",
      rt.spec.name, key, inst.cold_start_ms, path, assigned.size());
}

Status InstanceManager::Quarantine(uint32_t key, const std::string& reason) {
  std::unique_lock lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return NotFound("no instance " + std::to_string(key));
  Instance& inst = *it->second;
  if (inst.state != Instance::State::kReady && inst.state != Instance::State::kDraining) {
    return Unavailable("instance is not serving (it is stopping or already quarantined)");
  }
  FunctionRuntime& rt = *inst.fn->rt;
  const std::string& name = rt.spec.name;
  // First: no request reaches it any more, and those it holds are answered now.
  const uint32_t inflight = rt.router.RemoveInstance(key);
  if (inflight > 0) {
    sink_->FailInstance(key, 503,
                        "instance of function '" + name + "' was quarantined (" + reason +
                            ") while running the request");
  }
  if (!inst.cgroup || !cgroups_) {
    StopInstance(inst);
    return Unavailable("the instance has no cgroup to freeze: stopped instead");
  }
  char fname[96];
  std::snprintf(fname, sizeof fname, "%s-%x", name.c_str(), key);
  auto frozen = FrozenCgroup::Freeze(*inst.cgroup, cgroups_->version(), fname);
  if (!frozen.ok()) {
    spdlog::error("function {}: instance {:#x} (pid {}): cannot freeze it: {}; stopping it instead",
                  name, key, inst.pid, frozen.status().ToString());
    StopInstance(inst);
    return frozen.status();
  }
  inst.frozen = std::move(*frozen);
  inst.state = Instance::State::kQuarantined;
  inst.quarantine_reason = reason;
  // Its place on the node goes to the clean instance (a frozen process uses no CPU).
  if (inst.holds_reservation) {
    cluster_.Release(0, inst.reserved);
    inst.holds_reservation = false;
  }
  spdlog::warn(
      "function {}: instance {:#x} (pid {}) quarantined: {}; {} request(s) in flight "
      "answered 503; frozen in {} for inspection; starting a clean instance",
      name, key, inst.pid, reason, inflight, inst.frozen->dir());
  lock.unlock();
  Reconcile();  // the clean instance, now
  return Status::Ok();
}

void InstanceManager::OnManagerReadable() {
  std::array<EventDescriptor, 64> batch;
  for (;;) {
    auto got = manager_channel_->Receive(batch);
    if (!got.ok() || *got == 0) return;
    for (size_t i = 0; i < *got; ++i) {
      if (batch[i].kind == static_cast<uint16_t>(EventKind::kReady)) OnReady(batch[i].source);
      if (batch[i].kind == static_cast<uint16_t>(EventKind::kLoadReport)) {
        OnLoadReport(batch[i].source, ReadLoadReport(batch[i]));
      }
    }
  }
}

void InstanceManager::LogSeccompKills(uint64_t now) {
  // The kernel's audit record of a seccomp kill (which names the syscall) reaches its log from
  // the audit thread a moment after the process is gone: look for it on a later tick.
  constexpr uint64_t kAuditDelayNs = 200000000;
  std::erase_if(seccomp_kills_, [&](const SeccompKill& k) {
    if (now - k.at_ns < kAuditDelayNs) return false;
    const std::string call = SeccompKillSyscall(k.pid);
    spdlog::warn("function {}: instance {:#x} (pid {}) was killed by the seccomp filter for {}",
                 k.function, k.key, k.pid,
                 call.empty() ? std::string("a denied syscall (no audit record in the kernel log)")
                              : "syscall " + call);
    return true;
  });
}

void InstanceManager::OnExit(Instance* inst, int64_t status, int signal) {
  std::unique_lock lock(mu_);
  inst->exited = true;
  FunctionState& f = *inst->fn;
  FunctionRuntime& rt = *f.rt;
  const uint32_t inflight = rt.router.RemoveInstance(inst->key);
  const bool crashed = !inst->expected_exit;
  if (crashed || inflight > 0) {
    char why[160];
    if (signal == SIGSYS) {
      std::snprintf(why, sizeof why,
                    "killed by signal %d (SIGSYS: a syscall the seccomp filter denies)", signal);
      seccomp_kills_.push_back({rt.spec.name, inst->key, inst->pid, MonotonicNs()});
    } else if (signal != 0) {
      std::snprintf(why, sizeof why, "killed by signal %d", signal);
    } else {
      std::snprintf(why, sizeof why, "exited with status %lld", static_cast<long long>(status));
    }
    spdlog::warn("function {}: instance {:#x} (pid {}) {} with {} request(s) in flight",
                 rt.spec.name, inst->key, inst->pid, why, inflight);
    sink_->FailInstance(inst->key, 502,
                        "instance of function '" + rt.spec.name + "' crashed (" + why +
                            ") while running the request");
  } else {
    spdlog::info("function {}: instance {:#x} (pid {}) stopped", rt.spec.name, inst->key,
                 inst->pid);
  }
  if (crashed) {
    ++f.crashes;
    ++f.restarts;
    const double backoff =
        std::min(10.0, config_.restart_backoff_s * std::pow(2.0, std::max(0, int(f.crashes) - 1)));
    f.next_spawn_ns = MonotonicNs() + static_cast<uint64_t>(f.crashes > 1 ? backoff * 1e9 : 0);
  }
  // Every buffer the dead process held goes back to the pool.
  auto pool = pools_.find(inst->tenant);
  if (pool != pools_.end()) {
    const uint64_t n = pool->second->ReclaimHolder(inst->slot);
    if (n > 0)
      spdlog::info("pool {}: reclaimed {} buffer(s) of instance {:#x}", inst->tenant, n, inst->key);
  }
  used_slots_[inst->tenant] &= ~(1ull << inst->slot);
  if (observer_ != nullptr) observer_->InstanceGone(inst->key);
  inst->frozen.reset();  // thawed, and its v1 freezer directory removed
  inst->cgroup.reset();  // reaped: its cgroup is empty and goes
  if (inst->holds_reservation) cluster_.Release(0, inst->reserved);
  f.instance_s_done += static_cast<double>(MonotonicNs() - inst->spawn_ns) / 1e9;
  dataplane_.RemoveEndpoint(inst->key);
  by_key_.erase(inst->key);
  std::erase(f.instances, inst);
  auto on_closed = [](uv_handle_t* h) {
    auto* i = static_cast<Instance*>(h->data);
    if (--i->open_handles == 0) delete i;
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&inst->out), on_closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&inst->err), on_closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&inst->exit_poll), on_closed);
  lock.unlock();
  if (!stopping_) Reconcile();  // restart if it fell below its scale
}

}  // namespace shoal
