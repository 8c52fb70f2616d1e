#include "shoal/runtime/node/instance_manager_internal.h"

namespace shoal {

// ---- reconcile ------------------------------------------------------------------------------

void InstanceManager::Reconcile() {
  if (stopping_) return;
  std::lock_guard lock(mu_);
  if (specs_changed_.exchange(false)) SyncSpecs();
  const uint64_t now = MonotonicNs();
  for (auto& [name, f] : by_name_) {
    EnsureZygote(*f, now);
    ScaleFunction(*f, now);
  }
  if (config_.instance_start == InstanceStart::kZygote) {
    ReapStrays();
    // Exit reports of children that never became instances (refused after the fork).
    std::erase_if(zygote_exits_, [&](const auto& e) {
      for (const auto& [key, inst] : by_key_) {
        if (inst->zygote_pid == e.first.first && inst->pid == e.first.second) return false;
      }
      return true;
    });
  }
  if (!seccomp_kills_.empty()) LogSeccompKills(now);
  // Old generations: stop their instances as they go idle, then forget them.
  for (auto& f : retired_) {
    for (uint32_t key : f->rt->router.IdleDraining()) {
      auto it = by_key_.find(key);
      if (it != by_key_.end() && it->second->state != Instance::State::kStopping) {
        StopInstance(*it->second);
      }
    }
  }
  std::erase_if(retired_, [](const auto& f) { return f->instances.empty(); });
}

void InstanceManager::SyncSpecs() {
  std::vector<FunctionSpec> specs = specs_();
  std::map<std::string, const FunctionSpec*> wanted;
  for (const auto& s : specs) wanted[s.name] = &s;
  for (auto it = by_name_.begin(); it != by_name_.end();) {
    auto w = wanted.find(it->first);
    if (w == wanted.end() || w->second->generation != it->second->rt->spec.generation) {
      const bool deleted = w == wanted.end();
      Retire(*it->second, deleted ? "deleted" : "re-deployed");
      if (deleted) functions_.Erase(it->first);
      retired_.push_back(std::move(it->second));
      it = by_name_.erase(it);
    } else {
      FunctionState& f = *it->second;
      const FunctionSpec& now = *w->second;
      if (now.min_scale != f.min_scale || now.max_scale != f.max_scale) {
        spdlog::info("function {}: scale {}..{} (was {}..{})", it->first, now.min_scale,
                     now.max_scale, f.min_scale, f.max_scale);
        f.min_scale = now.min_scale;
        f.max_scale = now.max_scale;
        f.next_decision_ns = 0;  // decide within the new bounds on this tick
      }
      ++it;
    }
  }
  for (const auto& s : specs) {
    if (by_name_.count(s.name)) continue;
    auto pool = PoolFor(s.tenant);
    if (!pool.ok()) {
      spdlog::error("function {}: no pool for tenant {}: {}", s.name, s.tenant,
                    pool.status().ToString());
      continue;
    }
    auto f = std::make_unique<FunctionState>();
    f->rt = std::make_shared<FunctionRuntime>(s, *pool, metrics_, config_.max_queue_per_function);
    f->keep_alive_s = s.keep_alive_s;
    f->min_scale = s.min_scale;
    f->max_scale = s.max_scale;
    if (s.autoscaling.policy != "none") {
      const AutoscalingConfig ac = AutoscalingConfigOf(s);
      auto a = FunctionAutoscaler::Make(ac);
      if (a.ok()) {
        f->autoscaler = std::move(a).value();
      } else {  // the manifest parser checked it; a record from an older shoald may not be
        spdlog::error("function {}: autoscaling policy {}: {}; using the reactive scaler", s.name,
                      ac.policy, a.status().ToString());
      }
    }
    f->log.open(LogPath(s.name), std::ios::app);
    functions_.Set(s.name, f->rt);
    spdlog::info(
        "function {} (id {}, generation {}): {} concurrency {}, scale {}..{}, "
        "timeout {} s, keep-alive {} s, autoscaling {} (keep-alive {})",
        s.name, s.id, s.generation,
        s.handler.builtin.empty() ? "library " + s.handler.library : "builtin " + s.handler.builtin,
        s.concurrency, s.min_scale, s.max_scale, s.timeout_s, s.keep_alive_s,
        f->autoscaler ? s.autoscaling.policy : std::string("none"), s.autoscaling.keep_alive);
    by_name_[s.name] = std::move(f);
  }
}

void InstanceManager::Retire(FunctionState& f, const char* why) {
  spdlog::info("function {} generation {} {}: draining {} instance(s)", f.rt->spec.name,
               f.rt->spec.generation, why, f.instances.size());
  f.rt->retired = true;
  f.spare.reset();
  f.zygote.reset();
  for (const auto& w : f.rt->router.TakeWaiters()) {
    // Waiters of a re-deployed function are rejected too: the client retries on the new one.
    sink_->Reject(w.loop, w.request_id, 503,
                  "function '" + f.rt->spec.name + "' was " + why + " while the request waited");
  }
  for (Instance* inst : f.instances) {
    if (inst->state == Instance::State::kStarting || inst->state == Instance::State::kQuarantined) {
      StopInstance(*inst);
    } else if (inst->state == Instance::State::kReady) {
      inst->state = Instance::State::kDraining;
      f.rt->router.Drain(inst->key);
    }
  }
}

void InstanceManager::ScaleFunction(FunctionState& f, uint64_t now) {
  const FunctionSpec& spec = f.rt->spec;
  const auto snap = f.rt->router.Counts();
  const uint32_t concurrency = std::max<uint32_t>(1, spec.concurrency);
  const uint32_t demand = snap.inflight + snap.queued;
  const uint32_t needed = (demand + concurrency - 1) / concurrency;

  // Track activity per instance: an instance that finished or holds a request is busy now.
  uint32_t active = 0;
  for (const auto& load : f.rt->router.Loads()) {
    auto it = by_key_.find(load.instance);
    if (it == by_key_.end()) continue;
    Instance& inst = *it->second;
    if (load.inflight > 0 || load.served != inst.last_served) inst.last_busy_ns = now;
    inst.last_served = load.served;
    if (inst.prewarmed && !inst.prewarm_used && (load.inflight > 0 || load.served > 0)) {
      // A request found this instance already warm: the cold start it would have waited for
      // was taken ahead of time.
      inst.prewarm_used = true;
      ++f.cold_starts_avoided;
      metrics_.autoscaler_cold_starts_avoided.Add({{"function", spec.name}}).Increment();
    }
    if (inst.state == Instance::State::kDraining && load.inflight == 0) StopInstance(inst);
  }
  for (Instance* inst : f.instances) {
    if (inst->state == Instance::State::kStarting || inst->state == Instance::State::kReady) {
      ++active;
    }
  }

  uint32_t desired = 0;
  uint32_t floor = 0;
  uint32_t replicas = 0;  // below this a start is demand, above it a pre-warm
  uint64_t keep_alive_ns = static_cast<uint64_t>(spec.keep_alive_s * 1e9);
  if (f.autoscaler) {
    if (now >= f.next_decision_ns) {
      Decide(f, now);
      f.next_decision_ns =
          now + uint64_t{std::max<uint32_t>(1, config_.autoscale_interval_ms)} * 1000000ull;
    }
    desired = f.target;
    replicas = std::min(f.target, std::max(f.min_scale, f.decision.replicas));
    // The activator's part: a request waiting for a function with no instance starts one at
    // once instead of waiting for the next decision (scale from zero).
    if (snap.queued > 0 && active == 0) desired = std::max<uint32_t>(desired, 1);
    desired = std::min(desired, f.max_scale);
    // Never stop an instance while requests wait for one.
    floor = snap.queued > 0 ? std::max(desired, active) : desired;
    keep_alive_ns = static_cast<uint64_t>(std::max(0.0, f.keep_alive_s) * 1e9);
  } else {
    desired = std::min(f.max_scale, std::max(f.min_scale, needed));
    floor = std::max(f.min_scale, needed);
    replicas = desired;
  }
  f.desired = desired;

  // Scale up (crash back-off permitting).
  while (active < desired && now >= f.next_spawn_ns) {
    const bool prewarm = f.autoscaler && snap.queued == 0 && active >= replicas;
    if (!PlaceStart(f)) break;
    if (Status st = Spawn(f, prewarm); !st.ok()) {
      if (st.message() != f.start_error) {
        spdlog::error("function {}: cannot start an instance: {}", spec.name, st.ToString());
        f.start_error = st.message();
      }
      f.next_spawn_ns = now + static_cast<uint64_t>(config_.restart_backoff_s * 1e9);
      // Nothing will start for them until the cause is fixed: answer now, with the cause.
      for (const auto& w : f.rt->router.TakeWaiters()) {
        sink_->Reject(w.loop, w.request_id, 503,
                      "function '" + spec.name + "' cannot start an instance: " + st.message());
      }
      break;
    }
    f.start_error.clear();
    ++active;
  }
  // Scale down: idle beyond keep-alive, longest idle first, never below the floor. Draining
  // instances take no new request and stop once their last one finishes.
  if (active > floor) {
    std::vector<Instance*> idle;
    for (Instance* inst : f.instances) {
      if (inst->state != Instance::State::kReady) continue;
      if (f.rt->router.Inflight(inst->key) > 0) continue;
      if (now - inst->last_busy_ns < keep_alive_ns) continue;
      idle.push_back(inst);
    }
    std::sort(idle.begin(), idle.end(), [](const Instance* a, const Instance* b) {
      return a->last_busy_ns < b->last_busy_ns;
    });
    for (Instance* inst : idle) {
      if (active <= floor) break;
      spdlog::info("function {}: instance {:#x} idle for {:.1f} s: scaling down to {}", spec.name,
                   inst->key, (now - inst->last_busy_ns) / 1e9, active - 1);
      inst->state = Instance::State::kDraining;
      f.rt->router.Drain(inst->key);
      if (f.rt->router.Inflight(inst->key) == 0) StopInstance(*inst);
      --active;
    }
  }
}

void InstanceManager::Decide(FunctionState& f, uint64_t now) {
  FunctionRuntime& rt = *f.rt;
  const FunctionSpec& spec = rt.spec;
  const auto snap = rt.router.Counts();
  const FunctionRouter::Totals t = rt.router.totals();
  const FunctionRouter::Totals& p = f.last_totals;

  FunctionSignals g;
  g.function = spec.name;
  g.now_s = static_cast<double>(now) / 1e9;
  g.interval_s = f.last_sample_ns ? static_cast<double>(now - f.last_sample_ns) / 1e9
                                  : config_.autoscale_interval_ms / 1e3;
  g.inflight = snap.inflight;
  g.queued = snap.queued;
  g.arrivals = t.arrivals - p.arrivals;
  g.completions = t.completions - p.completions;
  const uint64_t dequeued = t.dequeued - p.dequeued;
  g.mean_queue_wait_s = dequeued ? (t.queue_wait_s - p.queue_wait_s) / dequeued : 0;
  // Little's law: time in flight over the interval divided by the requests that finished.
  g.mean_service_s = g.completions ? (t.busy_s - p.busy_s) / g.completions : 0;
  g.p99_latency_s = rt.latency.Summarize(now / 1000000000ull).p99_ms / 1e3;
  g.cold_starts = f.iv_cold;
  g.cold_start_cost_s = f.iv_cold ? f.iv_cold_s / f.iv_cold : f.last_cold_s;
  std::map<uint32_t, uint32_t> inflight_of;
  for (const auto& l : rt.router.Loads()) inflight_of[l.instance] = l.inflight;
  for (Instance* inst : f.instances) {
    if (inst->state == Instance::State::kStarting) ++g.starting;
    if (inst->state != Instance::State::kReady) continue;
    ++g.ready;
    if (inflight_of[inst->key] > 0)
      ++g.busy;
    else
      ++g.idle;
  }
  g.concurrency = std::max<uint32_t>(1, spec.concurrency);
  const LoadReport load = LoadOf(f);
  g.tokens_in_flight = load.tokens_in_flight;
  g.running_sequences = load.running;
  g.queued_sequences = load.queued;
  g.min_scale = f.min_scale;
  g.max_scale = f.max_scale;
  f.last_totals = t;
  f.last_sample_ns = now;
  f.iv_cold = 0;
  f.iv_cold_s = 0;

  const ScalingDecision d = f.autoscaler->Observe(g);
  if (signal_sink_) signal_sink_(spec, g);
  const uint32_t replicas = std::clamp(d.replicas, f.min_scale, f.max_scale);
  const uint32_t target =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{replicas} + d.prewarm, f.max_scale));
  const bool changed = !f.have_decision || target != f.target || replicas != f.decision.replicas ||
                       d.prewarm != f.decision.prewarm || d.panic != f.decision.panic ||
                       std::abs(d.keep_alive_s - f.keep_alive_s) > 0.5;
  if (changed) {
    char tokens[96] = "";
    if (g.tokens_in_flight > 0 || g.running_sequences > 0 || g.queued_sequences > 0) {
      std::snprintf(tokens, sizeof tokens, "; %llu tokens in flight, %u running, %u queued",
                    static_cast<unsigned long long>(g.tokens_in_flight), g.running_sequences,
                    g.queued_sequences);
    }
    char why[352];
    std::snprintf(why, sizeof why,
                  "desired %u (replicas %u + pre-warm %u), actual %u, keep-alive %.1f s, "
                  "target %.1f/instance%s; in flight %u, queued %u, %llu arrivals in %.1f s%s",
                  target, replicas, d.prewarm, g.ready + g.starting, d.keep_alive_s,
                  d.concurrency_target, d.panic ? ", panic" : "", g.inflight, g.queued,
                  static_cast<unsigned long long>(g.arrivals), g.interval_s, tokens);
    f.decision_why = why;
    spdlog::info("function {}: autoscaler {}: {}", spec.name, f.autoscaler->policy_name(), why);
    metrics_.autoscaler_decisions.Add({{"function", spec.name}}).Increment();
  }
  // The policy's own account can change while the numbers do not (the learned policy going idle
  // under a keep that holds the same instance): describe shows the one in force.
  f.decision_reason = f.decision_why;
  if (auto e = f.autoscaler->policy().Explain(); !e.empty()) f.decision_reason += "; " + e;
  f.decision = d;
  f.decision.replicas = replicas;
  f.have_decision = true;
  f.decision_ns = now;
  f.target = target;
  f.keep_alive_s = d.keep_alive_s > 0 ? d.keep_alive_s : spec.keep_alive_s;
}

}  // namespace shoal
