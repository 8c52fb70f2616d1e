#include "shoal/runtime/instance_manager.h"


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

#include "shoal/autoscaler/function_autoscaler.h"
#include "shoal/common/log.h"
#include "shoal/runtime/fl_data_path.h"
#include "shoal/runtime/node_capacity.h"
#include "shoal/runtime/zygote.h"
#include "shoal/sandbox/cgroup.h"
#include "shoal/sandbox/handler_library.h"
#include "shoal/sandbox/sandboxed_process.h"
#include "shoal/sandbox/seccomp_policy.h"
#include "shoal/sandbox/seccomp_report.h"
#include "shoal/sandbox/tenant_ids.h"

namespace shoal {
namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

}  // namespace

struct InstanceManager::Instance {
  enum class State { kStarting, kReady, kDraining, kStopping };
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
  Resources reserved;         // what placement reserved for it on this node
  bool holds_reservation = false;
  uint64_t last_served = 0;
  double cold_start_ms = 0;
  std::string start_path = "spawn";  // zygote | spawn
  std::string start_note;     // why a spawn where the zygote path was configured
  uint64_t prepare_ns = 0;    // its endpoint, cgroup and pipes, before spawn_ns
  uint64_t forked_ns = 0;     // zygote path: the zygote's answer, and the child's release
  uint64_t released_ns = 0;
  bool prefork = false;       // zygote path: started from the spare forked ahead
  uint32_t zygote_id = 0;     // which of its function's zygotes forked it (their count)
  int zygote_pid = 0;         // ... and that zygote's pid (its exit reports are believed)
  UniqueFd lifeline;          // zygote path: the child exits when this closes
  bool prewarmed = false;     // started ahead of demand by the autoscaling policy
  bool prewarm_used = false;  // ... and has taken its first request
  bool expected_exit = false;
  bool exited = false;
  int open_handles = 0;
  Endpoint endpoint;  // keeps the sockmap anchor open for the instance's lifetime
  ChildProcess child;
  uv_poll_t exit_poll{};  // on the child's pidfd: readable once it has exited
  std::unique_ptr<InstanceCgroup> cgroup;
  uv_pipe_t out{};
  uv_pipe_t err{};
  bool out_at_line_start = true;
  char read_buf[16384];
};

struct InstanceManager::FunctionState {
  std::shared_ptr<FunctionRuntime> rt;
  std::vector<Instance*> instances;
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
  // so that its fork is not on a request's path; forked again on the next tick.
  struct Spare {
    Zygote::Forked child;
    UniqueFd pidfd;
    uint32_t zygote_id = 0;
    int zygote_pid = 0;
  };
  std::optional<Spare> spare;

  // Autoscaling (null: policy none, the reactive rule).
  std::unique_ptr<FunctionAutoscaler> autoscaler;
  uint32_t target = 0;         // the policy's replicas + pre-warm, within min..max
  double keep_alive_s = 0;     // idle instances above the target stop after this
  ScalingDecision decision;
  bool have_decision = false;
  uint64_t decision_ns = 0;
  std::string decision_reason;
  uint64_t next_decision_ns = 0;
  uint64_t last_sample_ns = 0;
  FunctionRouter::Totals last_totals;
  uint32_t iv_cold = 0;        // cold starts since the last decision, and their cost
  double iv_cold_s = 0;
  double last_cold_s = 0;
  uint64_t prewarm_starts = 0;
  uint64_t cold_starts_avoided = 0;
  uint64_t cold_requests = 0;   // requests that waited for an instance's cold start
  double instance_s_done = 0;   // spawn-to-exit seconds of the instances that exited
};

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
    spdlog::info("instance manager: instances start forked from their function's zygote "
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
  uv_async_init(loop_, &poke_, [](uv_async_t* a) {
    static_cast<InstanceManager*>(a->data)->Reconcile();
  });
  poke_.data = this;
  uv_timer_init(loop_, &tick_);
  tick_.data = this;
  uv_timer_start(&tick_, [](uv_timer_t* t) {
    static_cast<InstanceManager*>(t->data)->Reconcile();
  }, 0, config_.control_interval_ms);
  started_ = true;
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
  auto choice = ChoosePoolBackend(config_.pool, config_.pool_bytes,
                                  PoolSegmentName(config_.node_name, ""));
  if (!choice.ok()) return choice.status();
  pool_choice_ = *choice;
  spdlog::info("pool: backend {} ({})", PoolBackendName(pool_choice_.backend), pool_choice_.reason);
  if (switch_ids_) {
    spdlog::info("sandbox: instances run as their tenant's uid/gid ({} tenant(s) fixed in the "
                 "config, others from uid {} up, kept in {}/tenants.yaml), no capabilities, "
                 "no_new_privs, seccomp ({} syscalls denied)",
                 config_.tenants.size(), config_.tenant_uid_base, config_.state_dir,
                 DeniedSyscalls().size());
  } else {
    spdlog::warn("sandbox: shoald is not root (uid {}): instances run as uid {} like shoald, "
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
    const PoolBackend other = backend == PoolBackend::kDpdk ? PoolBackend::kBoost : PoolBackend::kDpdk;
    if (!PoolFileExists(backend, name) && PoolFileExists(other, name)) {
      backend = other;
      reason = "auto: taking over the " + std::string(PoolBackendName(other)) +
               " pool a previous shoald left";
    }
  }
  auto pool = CreateOrRecoverPool(backend, name, config_.pool_bytes, kCoordinatorSlot, &recovered);
  if (!pool.ok() && backend == PoolBackend::kDpdk && config_.pool == "auto") {
    // Hugepages ran out for this tenant (others took them): auto falls back for this one.
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
  pool_reasons_[tenant] = reason;
  SharedPool* raw = pool->get();
  pools_[tenant] = std::move(*pool);
  return raw;
}

// ---- reconcile ------------------------------------------------------------------------------

void InstanceManager::Reconcile() {
  if (stopping_) return;
  std::lock_guard lock(mu_);
  if (specs_changed_.exchange(false)) SyncSpecs();
  const uint64_t now = NowNs();
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
    if (s.autoscaling.policy != "none") {
      AutoscalingConfig ac;
      ac.policy = s.autoscaling.policy;
      ac.target = s.autoscaling.target;
      ac.keep_alive = s.autoscaling.keep_alive;
      ac.params = s.autoscaling.params;
      ac.policy_file = s.autoscaling.policy_file;
      ac.fixed_keep_alive_s = s.keep_alive_s;
      auto a = FunctionAutoscaler::Make(ac);
      if (a.ok()) {
        f->autoscaler = std::move(a).value();
      } else {  // the manifest parser checked it; a record from an older shoald may not be
        spdlog::error("function {}: autoscaling policy {}: {}; using the reactive scaler",
                      s.name, ac.policy, a.status().ToString());
      }
    }
    f->log.open(LogPath(s.name), std::ios::app);
    functions_.Set(s.name, f->rt);
    spdlog::info("function {} (id {}, generation {}): {} concurrency {}, scale {}..{}, "
                 "timeout {} s, keep-alive {} s, autoscaling {} (keep-alive {})",
                 s.name, s.id, s.generation,
                 s.handler.builtin.empty() ? "library " + s.handler.library
                                           : "builtin " + s.handler.builtin,
                 s.concurrency, s.min_scale, s.max_scale, s.timeout_s, s.keep_alive_s,
                 f->autoscaler ? s.autoscaling.policy : std::string("none"),
                 s.autoscaling.keep_alive);
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
    if (inst->state == Instance::State::kStarting) {
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
    replicas = std::min(f.target, std::max(spec.min_scale, f.decision.replicas));
    // The activator's part: a request waiting for a function with no instance starts one at
    // once instead of waiting for the next decision (scale from zero).
    if (snap.queued > 0 && active == 0) desired = std::max<uint32_t>(desired, 1);
    desired = std::min(desired, spec.max_scale);
    // Never stop an instance while requests wait for one.
    floor = snap.queued > 0 ? std::max(desired, active) : desired;
    keep_alive_ns = static_cast<uint64_t>(std::max(0.0, f.keep_alive_s) * 1e9);
  } else {
    desired = std::min(spec.max_scale, std::max(spec.min_scale, needed));
    floor = std::max(spec.min_scale, needed);
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
    std::sort(idle.begin(), idle.end(),
              [](const Instance* a, const Instance* b) { return a->last_busy_ns < b->last_busy_ns; });
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
    if (inflight_of[inst->key] > 0) ++g.busy; else ++g.idle;
  }
  g.concurrency = std::max<uint32_t>(1, spec.concurrency);
  g.min_scale = spec.min_scale;
  g.max_scale = spec.max_scale;
  f.last_totals = t;
  f.last_sample_ns = now;
  f.iv_cold = 0;
  f.iv_cold_s = 0;

  const ScalingDecision d = f.autoscaler->Observe(g);
  const uint32_t replicas = std::clamp(d.replicas, spec.min_scale, spec.max_scale);
  const uint32_t target = static_cast<uint32_t>(
      std::min<uint64_t>(uint64_t{replicas} + d.prewarm, spec.max_scale));
  const bool changed = !f.have_decision || target != f.target ||
                       replicas != f.decision.replicas || d.prewarm != f.decision.prewarm ||
                       d.panic != f.decision.panic ||
                       std::abs(d.keep_alive_s - f.keep_alive_s) > 0.5;
  if (changed) {
    char why[256];
    std::snprintf(why, sizeof why,
                  "desired %u (replicas %u + pre-warm %u), actual %u, keep-alive %.1f s, "
                  "target %.1f/instance%s; in flight %u, queued %u, %llu arrivals in %.1f s",
                  target, replicas, d.prewarm, g.ready + g.starting, d.keep_alive_s,
                  d.concurrency_target, d.panic ? ", panic" : "", g.inflight, g.queued,
                  static_cast<unsigned long long>(g.arrivals), g.interval_s);
    f.decision_reason = why;
    if (auto e = f.autoscaler->policy().Explain(); !e.empty()) f.decision_reason += "; " + e;
    spdlog::info("function {}: autoscaler {}: {}", spec.name, f.autoscaler->policy_name(), why);
    metrics_.autoscaler_decisions.Add({{"function", spec.name}}).Increment();
  }
  f.decision = d;
  f.decision.replicas = replicas;
  f.have_decision = true;
  f.decision_ns = now;
  f.target = target;
  f.keep_alive_s = d.keep_alive_s > 0 ? d.keep_alive_s : spec.keep_alive_s;
}

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
  const uint64_t begin_ns = NowNs();
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
  std::unique_ptr<InstanceCgroup> cgroup;
  if (cgroups_) {
    char name[96];
    std::snprintf(name, sizeof name, "%s-%x", spec.name.c_str(), key);
    CgroupLimits limits{spec.cpu, spec.memory_bytes, config_.instance_pids_max};
    auto cg = cgroups_->Create(name, limits);
    if (cg.ok()) {
      cgroup = std::move(*cg);
    } else {
      spdlog::warn("function {}: instance runs without its cgroup: {}", spec.name,
                   cg.status().ToString());
    }
  }

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
  sandbox.cgroup = cgroup.get();

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
  raw->spawn_ns = NowNs();
  raw->prepare_ns = raw->spawn_ns - begin_ns;
  raw->last_busy_ns = raw->spawn_ns;
  Result<ChildProcess> child = Internal("not started");
  bool started = false;
  if (config_.instance_start == InstanceStart::kZygote) {
    ChildProcess forked;
    bool refuse = false;
    Status st = ForkFromZygote(f, *raw, out_pipe[1], err_pipe[1], cgroup.get(), &forked, &refuse);
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
  if (!started) child = SpawnSandboxed(opts, sandbox);
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
          spdlog::info("function {}: zygote (pid {}) ready in {:.2f} ms: handler loaded, pool "
                       "attached",
                       spec.name, z.pid(), (NowNs() - f.zygote_started_ns) / 1e6);
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
          spdlog::warn("function {}: zygote (pid {}) cannot fork: {}; its instances start by a "
                       "full spawn",
                       spec.name, z.pid(), z.reason());
          f.zygote.reset();
          return;
        default: break;
      }
    }
    if (!z.Exited()) {
      if (z.state() == Zygote::State::kReady && !f.spare) (void)ForkSpare(f);
      return;
    }
    f.spare.reset();
    if (f.zygote_logged != Zygote::State::kFailed) {
      spdlog::warn("function {}: {}; restarting it", spec.name, z.reason());
    }
    f.zygote.reset();
    ++f.zygote_failures;
    const double backoff =
        std::min(10.0, config_.restart_backoff_s *
                           std::pow(2.0, std::max(0, int(f.zygote_failures) - 2)));
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
    f.zygote_retry_ns = now + static_cast<uint64_t>(
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
  f.zygote_started_ns = NowNs();
  auto z = Zygote::Start(std::move(opts), sandbox, log.get(), std::move(cgroup), &zygote_exits_);
  if (!z.ok()) return retry_later(z.status().message());
  f.zygote = std::move(*z);
  f.zygote_logged = Zygote::State::kStarting;
  ++f.zygote_count;
  spdlog::info("function {}: zygote started (pid {}, tenant {}{})", spec.name, f.zygote->pid(),
               spec.tenant,
               switch_ids_ ? ", uid " + std::to_string(sandbox.ids.uid) : std::string());
}

Status InstanceManager::ForkFromZygote(FunctionState& f, Instance& inst, int out_fd, int err_fd,
                                       const InstanceCgroup* cgroup, ChildProcess* child_out,
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
  inst.forked_ns = NowNs();
  inst.prefork = spare;
  const pid_t pid = child.child.pid;
  // Into the instance's cgroup before it runs (the tenant cannot write cgroup.procs). On an
  // error the child is dropped: its start socket closes and it exits.
  if (cgroup != nullptr) {
    const std::string text = std::to_string(pid);
    for (const auto& fd : cgroup->procs()) {
      if (write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        return ErrnoStatus("moving the forked instance into its cgroup", errno);
      }
    }
  }
  if (Status st = Zygote::Start(child.child, inst.key, inst.slot, inst.endpoint.fd(), out_fd,
                                err_fd);
      !st.ok()) {
    return Unavailable("starting the forked instance: " + st.message());
  }
  inst.released_ns = NowNs();
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
  f.spare = FunctionState::Spare{std::move(*forked), std::move(pidfd), f.zygote_count, z.pid()};
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
    spdlog::warn("function {}: instance {:#x} (pid {}) exited; its exit status is unknown (its "
                 "zygote reaped it and died before reporting it)",
                 inst.fn->rt->spec.name, inst.key, inst.pid);
    return -1;
  }
  return 0;
}

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
  inst.state = Instance::State::kStopping;
  inst.expected_exit = true;
  inst.child.Signal(SIGTERM);
}

void InstanceManager::OnReady(uint32_t key) {
  std::lock_guard lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  Instance& inst = *it->second;
  if (inst.state != Instance::State::kStarting) return;
  inst.state = Instance::State::kReady;
  inst.ready_ns = NowNs();
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
  spdlog::info("function {}: instance {:#x} ready in {:.2f} ms (cold start, {}), took {} queued "
               "request(s)",
               rt.spec.name, key, inst.cold_start_ms, path, assigned.size());
}

void InstanceManager::OnManagerReadable() {
  std::array<EventDescriptor, 64> batch;
  for (;;) {
    auto got = manager_channel_->Receive(batch);
    if (!got.ok() || *got == 0) return;
    for (size_t i = 0; i < *got; ++i) {
      if (batch[i].kind == static_cast<uint16_t>(EventKind::kReady)) OnReady(batch[i].source);
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
      seccomp_kills_.push_back({rt.spec.name, inst->key, inst->pid, NowNs()});
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
    f.next_spawn_ns = NowNs() + static_cast<uint64_t>(f.crashes > 1 ? backoff * 1e9 : 0);
  }
  // Every buffer the dead process held goes back to the pool.
  auto pool = pools_.find(inst->tenant);
  if (pool != pools_.end()) {
    const uint64_t n = pool->second->ReclaimHolder(inst->slot);
    if (n > 0) spdlog::info("pool {}: reclaimed {} buffer(s) of instance {:#x}", inst->tenant, n, inst->key);
  }
  used_slots_[inst->tenant] &= ~(1ull << inst->slot);
  inst->cgroup.reset();  // reaped: its cgroup is empty and goes
  if (inst->holds_reservation) cluster_.Release(0, inst->reserved);
  f.instance_s_done += static_cast<double>(NowNs() - inst->spawn_ns) / 1e9;
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
  const uint64_t deadline = NowNs() + static_cast<uint64_t>(grace_s * 1e9);
  while (!by_key_.empty() && NowNs() < deadline) uv_run(loop_, UV_RUN_NOWAIT), usleep(1000);
  for (auto& [key, inst] : by_key_) inst->child.Signal(SIGKILL);
  while (!by_key_.empty()) uv_run(loop_, UV_RUN_ONCE);
  uv_timer_stop(&tick_);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&poke_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&manager_poll_), nullptr);
  uv_run(loop_, UV_RUN_NOWAIT);
  dataplane_.RemoveEndpoint(kManagerEndpoint);
  started_ = false;
}

// ---- RuntimeView ----------------------------------------------------------------------------

FunctionStats InstanceManager::Stats(const std::string& function) {
  FunctionStats st;
  std::lock_guard lock(mu_);
  auto it = by_name_.find(function);
  if (it == by_name_.end()) return st;
  FunctionState& f = *it->second;
  FunctionRuntime& rt = *f.rt;
  const auto snap = rt.router.Counts();
  const uint64_t now = NowNs();
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
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  auto summary = rt.latency.Summarize(static_cast<uint64_t>(ts.tv_sec));
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
      case Instance::State::kStarting: info.state = "starting"; ++st.starting; break;
      case Instance::State::kReady: info.state = "ready"; ++st.ready; break;
      case Instance::State::kDraining: info.state = "draining"; break;
      case Instance::State::kStopping: info.state = "stopping"; break;
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
      if (inst->state == Instance::State::kStarting) ++starting;
      else if (inst->state == Instance::State::kReady) ++ready;
      else ++draining;
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
    metrics_.pool_bytes.Add({{"tenant", tenant}, {"state", "used"}}).Set(static_cast<double>(s.used_bytes));
    metrics_.pool_bytes.Add({{"tenant", tenant}, {"state", "free"}}).Set(static_cast<double>(s.free_bytes));
  }
}

}  // namespace shoal
