#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

// ---- RuntimeView ----------------------------------------------------------------------------

std::string InstanceManager::CgroupVersion() const { return cgroups_ ? cgroups_->version() : ""; }

FunctionStats InstanceManager::Stats(const std::string& function) {
  FunctionStats st;
  std::lock_guard lock(mu_);
  auto it = by_name_.find(function);
  if (it == by_name_.end()) return st;
  FunctionState& f = *it->second;
  FunctionRuntime& rt = *f.rt;
  const auto snap = rt.router.Counts();
  const uint64_t now = MonotonicNs();
  st.desired = f.desired;
  st.inflight = snap.inflight;
  st.policy = f.autoscaler ? f.autoscaler->policy_name() : "none";
  st.unschedulable = f.unschedulable.empty() ? f.start_error : f.unschedulable;
  if (f.autoscaler) {
    st.decision_replicas = f.decision.replicas;
    st.decision_prewarm = f.decision.prewarm;
    st.decision_keep_alive_s = f.keep_alive_s;
    st.decision_target = f.decision.concurrency_target;
    st.decision_panic = f.decision.panic;
    st.decision_reason = f.decision_reason;
    if (f.have_decision) st.decision_age_s = (now - f.decision_ns) / 1e9;
  } else {
    st.decision_replicas = f.desired;
    st.decision_keep_alive_s = rt.spec.keep_alive_s;
    st.decision_target = std::max<uint32_t>(1, rt.spec.concurrency);
  }
  st.prewarm_starts = f.prewarm_starts;
  st.cold_starts_avoided = f.cold_starts_avoided;
  st.cold_requests = f.cold_requests;
  st.instance_seconds = f.instance_s_done;
  for (Instance* inst : f.instances) st.instance_seconds += (now - inst->spawn_ns) / 1e9;
  st.queued = snap.queued;
  auto summary = rt.latency.Summarize(MonotonicNs() / 1000000000ull);
  st.rps = summary.rps;
  st.p50_ms = summary.p50_ms;
  st.p99_ms = summary.p99_ms;
  st.requests_total = rt.requests_total.load();
  st.errors_total = rt.errors_total.load();
  st.cold_starts = rt.cold_starts.load();
  st.last_cold_start_ms = rt.last_cold_start_us.load() / 1e3;
  if (auto c = dataplane_.Counters(rt.spec.id)) {
    st.bpf_events = c->events;
    st.bpf_bytes = c->bytes;
  }
  const auto loads = rt.router.Loads();
  for (Instance* inst : f.instances) {
    InstanceInfo info;
    info.id = inst->key;
    info.pid = inst->pid;
    switch (inst->state) {
      case Instance::State::kStarting:
        info.state = "starting";
        ++st.starting;
        break;
      case Instance::State::kReady:
        info.state = "ready";
        ++st.ready;
        break;
      case Instance::State::kDraining:
        info.state = "draining";
        break;
      case Instance::State::kStopping:
        info.state = "stopping";
        break;
      case Instance::State::kQuarantined:
        info.state = "quarantined";
        info.quarantine = inst->quarantine_reason +
                          (inst->frozen ? "; frozen in " + inst->frozen->dir() : std::string());
        break;
    }
    for (const auto& l : loads) {
      if (l.instance == inst->key) {
        info.inflight = l.inflight;
        info.served = l.served;
      }
    }
    info.age_s = (now - inst->spawn_ns) / 1e9;
    info.cold_start_ms = inst->cold_start_ms;
    info.start_path = inst->start_path;
    info.start_note = inst->start_note;
    info.restarts = f.restarts;
    st.instances.push_back(info);
  }
  st.actual = st.ready + st.starting;
  if (observer_ != nullptr) observer_->Describe(function, &st);
  return st;
}

LogChunk InstanceManager::Logs(const std::string& function, uint64_t offset, uint64_t max_bytes) {
  LogChunk chunk;
  std::ifstream in(LogPath(function), std::ios::binary);
  if (!in) {
    chunk.next_offset = offset;
    return chunk;
  }
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  if (offset > size) offset = size;
  const uint64_t n = std::min(size - offset, max_bytes);
  chunk.text.resize(n);
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(chunk.text.data(), static_cast<std::streamsize>(n));
  chunk.next_offset = offset + n;
  return chunk;
}

std::vector<TenantPoolInfo> InstanceManager::Pools() {
  std::vector<TenantPoolInfo> out;
  std::lock_guard lock(mu_);
  for (auto& [tenant, pool] : pools_) {
    const PoolStats s = pool->Stats();
    out.push_back({tenant, std::string(PoolBackendName(pool->backend())), s.capacity_bytes,
                   s.used_bytes, s.free_bytes, s.live_buffers, s.alloc_failures});
  }
  return out;
}

void InstanceManager::RefreshMetrics() {
  std::lock_guard lock(mu_);
  metrics_.dataplane_mode.Add({{"mode", DataPlaneKindName(dataplane_.kind())}}).Set(1);
  for (auto& [tenant, pool] : pools_) {
    metrics_.pool_backend
        .Add({{"tenant", tenant},
              {"backend", std::string(PoolBackendName(pool->backend()))},
              {"reason", pool_reasons_[tenant]}})
        .Set(1);
  }
  for (auto& [name, f] : by_name_) {
    FunctionRuntime& rt = *f->rt;
    const auto snap = rt.router.Counts();
    metrics_.inflight.Add({{"function", name}}).Set(snap.inflight);
    metrics_.queued.Add({{"function", name}}).Set(snap.queued);
    uint32_t starting = 0, ready = 0, draining = 0;
    for (Instance* inst : f->instances) {
      if (inst->state == Instance::State::kStarting)
        ++starting;
      else if (inst->state == Instance::State::kReady)
        ++ready;
      else
        ++draining;
    }
    metrics_.instances.Add({{"function", name}, {"state", "starting"}}).Set(starting);
    metrics_.instances.Add({{"function", name}, {"state", "ready"}}).Set(ready);
    metrics_.instances.Add({{"function", name}, {"state", "draining"}}).Set(draining);
    metrics_.instances.Add({{"function", name}, {"state", "desired"}}).Set(f->desired);
    uint32_t prewarmed = 0;
    for (Instance* inst : f->instances) {
      if (inst->prewarmed && !inst->prewarm_used && inst->state != Instance::State::kStopping)
        ++prewarmed;
    }
    const prometheus::Labels fl{{"function", name}};
    const LoadReport load = LoadOf(*f);
    metrics_.tokens_in_flight.Add(fl).Set(static_cast<double>(load.tokens_in_flight));
    metrics_.sequences.Add({{"function", name}, {"state", "running"}}).Set(load.running);
    metrics_.sequences.Add({{"function", name}, {"state", "queued"}}).Set(load.queued);
    metrics_.autoscaler_desired.Add(fl).Set(f->desired);
    metrics_.autoscaler_actual.Add(fl).Set(starting + ready);
    metrics_.autoscaler_prewarm.Add(fl).Set(f->autoscaler ? f->decision.prewarm : 0);
    metrics_.autoscaler_prewarmed.Add(fl).Set(prewarmed);
    metrics_.autoscaler_keep_alive.Add(fl).Set(f->autoscaler ? f->keep_alive_s
                                                             : rt.spec.keep_alive_s);
    metrics_.autoscaler_target.Add(fl).Set(
        f->autoscaler ? f->decision.concurrency_target
                      : static_cast<double>(std::max<uint32_t>(1, rt.spec.concurrency)));
    metrics_.autoscaler_panic.Add(fl).Set(f->autoscaler && f->decision.panic ? 1 : 0);
    if (auto c = dataplane_.Counters(rt.spec.id)) {
      metrics_.dataplane_events.Add({{"function", name}}).Set(static_cast<double>(c->events));
      metrics_.dataplane_bytes.Add({{"function", name}}).Set(static_cast<double>(c->bytes));
      metrics_.dataplane_inflight.Add({{"function", name}}).Set(static_cast<double>(c->inflight));
    }
  }
  for (auto& [tenant, pool] : pools_) {
    const PoolStats s = pool->Stats();
    metrics_.pool_bytes.Add({{"tenant", tenant}, {"state", "used"}})
        .Set(static_cast<double>(s.used_bytes));
    metrics_.pool_bytes.Add({{"tenant", tenant}, {"state", "free"}})
        .Set(static_cast<double>(s.free_bytes));
  }
}

}  // namespace shoal
