#include "shoal/security/detect/behaviour_monitor.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shoal/common/clock.h"
#include "shoal/common/file_io.h"
#include "shoal/common/log.h"
#include "shoal/runtime/sandbox/cgroup.h"

namespace shoal {
namespace {

static_assert(detect::kSyscallClasses == SHOAL_BHV_CLASSES);

detect::ModelOptions Options(const NodeConfig& config) {
  detect::ModelOptions o;
  o.learn_intervals = config.detect_learn_intervals;
  o.allowed_paths = detect::DefaultAllowedPaths();
  return o;
}

detect::Interval Diff(const BehaviourCounters& now, const BehaviourCounters& before) {
  auto d = [](uint64_t a, uint64_t b) { return a >= b ? a - b : 0; };
  detect::Interval iv;
  for (int i = 0; i < detect::kSyscallClasses; ++i)
    iv.syscalls[i] = d(now.syscalls[i], before.syscalls[i]);
  iv.execs = d(now.execs, before.execs);
  iv.connects = d(now.connects, before.connects);
  iv.opens = d(now.opens, before.opens);
  iv.forks = d(now.forks, before.forks);
  iv.bytes_sent = d(now.bytes_sent, before.bytes_sent);
  iv.bytes_recv = d(now.bytes_recv, before.bytes_recv);
  iv.cpu_ns = d(now.cpu_ns, before.cpu_ns);
  iv.events_lost = d(now.events_lost, before.events_lost);
  return iv;
}

detect::Event ToEvent(const BehaviourEvent& ev) {
  detect::Event e{detect::EventKind::kOpen, ev.detail};
  if (ev.kind == SHOAL_BHV_EV_EXEC) e.kind = detect::EventKind::kExec;
  if (ev.kind != SHOAL_BHV_EV_CONNECT) return e;
  e.kind = detect::EventKind::kConnect;
  char host[INET6_ADDRSTRLEN] = "?";
  if (ev.family == AF_INET) {
    inet_ntop(AF_INET, ev.addr, host, sizeof host);
    e.detail = std::string(host) + ":" + std::to_string(ev.port);
  } else if (ev.family == AF_INET6) {
    inet_ntop(AF_INET6, ev.addr, host, sizeof host);
    e.detail = "[" + std::string(host) + "]:" + std::to_string(ev.port);
  } else {
    e.detail = "unix:" + std::string(ev.detail);
  }
  return e;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

BehaviourMonitor::BehaviourMonitor(const NodeConfig& config, uv_loop_t* loop)
    : config_(config),
      loop_(loop),
      profile_dir_(config.state_dir + "/detect"),
      detector_(Options(config)) {}

BehaviourMonitor::~BehaviourMonitor() { Stop(); }

void BehaviourMonitor::Start(const std::string& cgroup_version, QuarantineFn quarantine) {
  quarantine_ = std::move(quarantine);
  // Sampled syscalls rely on fanotify for the opens between slices. Where it cannot start
  // (no CAP_SYS_ADMIN, as in the Kubernetes DaemonSet's capability set), the node watches every
  // syscall instead, so that no open outside the allowed paths goes unseen.
  if (config_.detect && config_.detect_syscalls == DetectSyscalls::kSampled && !opens_ &&
      opens_error_.empty()) {
    SetOpenWatch(OpenWatch::Start());
  }
  mode_ = config_.detect_syscalls;
  if (mode_ == DetectSyscalls::kSampled && !opens_) {
    mode_ = DetectSyscalls::kOn;
    spdlog::warn(
        "detector: fanotify cannot watch opens ({}): the sys_enter probe watches every syscall "
        "instead (as detect_syscalls: true), so every open is still seen",
        opens_error_);
  }
  const DetectSyscalls mode = mode_;
  if (!config_.detect) {
    off_reason_ = "off by config (detect: false)";
  } else if (cgroup_version.empty()) {
    off_reason_ =
        "instances run without cgroups (config cgroups: off, or none could be made), "
        "and the probes tell instances apart by their cgroup";
  } else {
    auto p =
        BehaviourProbes::Load(cgroup_version == "v2" ? BehaviourProbes::CgroupMode::kV2
                                                     : BehaviourProbes::CgroupMode::kV1Memory,
                              mode == DetectSyscalls::kOn    ? BehaviourProbes::Syscalls::kAlways
                              : mode == DetectSyscalls::kOff ? BehaviourProbes::Syscalls::kOff
                                                             : BehaviourProbes::Syscalls::kSampled);
    if (p.ok()) {
      probes_ = std::move(*p);
      off_reason_.clear();
    } else {
      off_reason_ = "the behaviour probes cannot load: " + p.status().ToString();
    }
  }
  if (!probes_) {
    spdlog::warn("detector: OFF: {}; instances are not watched for compromise", off_reason_);
    opens_.reset();
    return;
  }
  std::string hooks;
  if (mode == DetectSyscalls::kOn) {
    hooks = "sys_enter (detect_syscalls: true: every syscall of the node pays for it), ";
  } else if (mode == DetectSyscalls::kOff) {
    hooks =
        "inet_sock_set_state (detect_syscalls: false: no syscall classes, no open paths, TCP "
        "connects only), ";
  } else {
    hooks = "inet_sock_set_state, sys_enter for " + std::to_string(config_.detect_sample_percent) +
            " % of each interval (detect_syscalls: sampled: syscall classes scaled from the "
            "slice, open attempts in it; TCP connects only), ";
  }
  spdlog::info(
      "detector: behaviour probes loaded (tp_btf {}sched_process_exec, "
      "sched_stat_runtime, sched_process_fork, sock_send_length, sock_recv_length; "
      "instances keyed by their cgroup {} id); scoring every {} ms after {} learning "
      "intervals; profiles in {}",
      hooks, cgroup_version == "v2" ? "v2" : "v1 memory", config_.detect_interval_ms,
      config_.detect_learn_intervals, profile_dir_);
  if (mode != DetectSyscalls::kSampled) opens_.reset();
  if (mode == DetectSyscalls::kSampled) {
    if (opens_) {
      std::string marked;
      for (const auto& m : opens_->marked()) marked += (marked.empty() ? "" : ", ") + m;
      spdlog::info(
          "detector: opens watched through fanotify (filesystems of {}); an open the "
          "kernel refuses is seen only in the sys_enter slices",
          marked);
      uv_poll_init(loop_, &opens_poll_, opens_->fd());
      opens_poll_.data = this;
      uv_poll_start(&opens_poll_, UV_READABLE, [](uv_poll_t* h, int, int) {
        auto* self = static_cast<BehaviourMonitor*>(h->data);
        std::lock_guard lock(self->mu_);
        self->DrainOpens();
      });
      opens_poll_started_ = true;
    }
    uv_timer_init(loop_, &slice_timer_);
    slice_timer_.data = this;
    slice_timer_started_ = true;
    ScheduleSlice();
  }
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<BehaviourMonitor*>(t->data)->Tick(); },
      config_.detect_interval_ms, config_.detect_interval_ms);
  timer_started_ = true;
}

void BehaviourMonitor::SetOpenWatch(Result<std::unique_ptr<OpenWatch>> watch) {
  if (watch.ok()) {
    opens_ = std::move(*watch);
    opens_error_.clear();
  } else {
    opens_.reset();
    opens_error_ = watch.status().ToString();
  }
}

void BehaviourMonitor::ScheduleSlice() {
  const uint64_t slice_ms = std::max<uint64_t>(
      1, uint64_t{config_.detect_interval_ms} * config_.detect_sample_percent / 100);
  const uint64_t wait_ms =
      config_.detect_interval_ms > slice_ms ? config_.detect_interval_ms - slice_ms : 0;
  if (wait_ms == 0) {
    AttachSlice();
    return;
  }
  uv_timer_start(
      &slice_timer_, [](uv_timer_t* t) { static_cast<BehaviourMonitor*>(t->data)->AttachSlice(); },
      wait_ms, 0);
}

void BehaviourMonitor::AttachSlice() {
  if (!probes_ || probes_->syscalls_attached()) return;
  if (Status st = probes_->AttachSyscalls(); !st.ok()) {
    spdlog::warn("detector: sys_enter slice not attached: {}", st.ToString());
    return;
  }
  slice_start_ns_ = MonotonicNs();
  // The requests each instance finishes in the slice are what its syscalls are counted over.
  std::lock_guard lock(mu_);
  for (auto& [key, w] : watched_) {
    auto rt = w.runtime.lock();
    w.slice_served = rt ? ServedBy(rt.get(), key) : w.last_served;
  }
}

void BehaviourMonitor::DrainOpens() {
  if (!opens_) return;
  opens_->Drain(
      [this](int pid) -> uint64_t {
        auto it = pid_owner_.find(pid);
        if (it != pid_owner_.end()) return it->second;
        const uint64_t cg = probes_->CgroupOfPid(pid);
        pid_owner_.emplace(pid, cg);
        return cg;
      },
      [this](uint64_t cgroup_id, int, std::string_view path) {
        auto c = by_cgroup_.find(cgroup_id);
        if (c == by_cgroup_.end()) return;
        auto w = watched_.find(c->second);
        if (w == watched_.end()) return;
        ++w->second.opens;
        // Each distinct path once per instance (as the probes' seen set does); a bounded set.
        constexpr size_t kMaxPaths = 4096;
        if (w->second.opened.size() >= kMaxPaths) {
          if (w->second.opened.count(std::string(path))) return;
        } else if (!w->second.opened.emplace(path).second) {
          return;
        }
        open_events_[cgroup_id].push_back({detect::EventKind::kOpen, std::string(path)});
      });
}

void BehaviourMonitor::Stop() {
  if (timer_started_) {
    uv_timer_stop(&timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
    timer_started_ = false;
  }
  if (slice_timer_started_) {
    uv_timer_stop(&slice_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&slice_timer_), nullptr);
    slice_timer_started_ = false;
  }
  if (opens_poll_started_) {
    uv_poll_stop(&opens_poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(&opens_poll_), nullptr);
    opens_poll_started_ = false;
  }
  if (probes_) probes_->DetachSyscalls();
}

std::string BehaviourMonitor::ProfilePath(const std::string& function, uint64_t generation) const {
  return profile_dir_ + "/" + function + ".g" + std::to_string(generation) + ".profile";
}

void BehaviourMonitor::LoadProfile(const std::string& function, uint64_t generation) {
  const std::string path = ProfilePath(function, generation);
  const std::optional<std::string> text = ReadFileBytes(path);
  if (!text) return;
  if (Status st = detector_.LoadProfile(function, *text); !st.ok()) {
    spdlog::error("detector: function {}: profile {} refused ({}); learning a new baseline",
                  function, path, st.message());
    return;
  }
  spdlog::info("detector: function {}: baseline read from {}: scoring from its first interval",
               function, path);
}

void BehaviourMonitor::SaveProfile(const std::string& function) {
  const std::string text = detector_.Profile(function);
  std::error_code ec;
  std::filesystem::create_directories(profile_dir_, ec);
  const uint64_t generation = records_[function].generation;
  const std::string path = ProfilePath(function, generation);
  // Profiles of the function's earlier generations are of code that no longer runs.
  for (const auto& e : std::filesystem::directory_iterator(profile_dir_, ec)) {
    const std::string name = e.path().filename().string();
    const std::string prefix = function + ".g", suffix = ".profile";
    if (e.path().string() == path || !name.starts_with(prefix) || !name.ends_with(suffix) ||
        name.size() <= prefix.size() + suffix.size()) {
      continue;
    }
    const std::string gen = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (gen.find_first_not_of("0123456789") == std::string::npos)
      std::filesystem::remove(e.path(), ec);
  }
  if (Status st = WriteFileAtomic(path, text, 0600); !st.ok()) {
    spdlog::warn("detector: function {}: baseline learned, not saved: {}", function, st.message());
    return;
  }
  spdlog::info("detector: function {}: baseline learned ({}); saved to {}", function,
               detector_.State(function), path);
}

void BehaviourMonitor::InstanceReady(const ObservedInstance& inst) {
  if (!probes_ || inst.spec == nullptr) return;
  // The cgroup directory the probes key on: v2's own, or the one in the v1 memory hierarchy.
  std::string dir;
  if (probes_->mode() == BehaviourProbes::CgroupMode::kV2) {
    if (!inst.cgroup_dirs.empty()) dir = inst.cgroup_dirs.front();
  } else if (auto m = cgroup_detail::FindMount("memory"); m.ok()) {
    for (const auto& d : inst.cgroup_dirs) {
      if (d.rfind(m->mount_point + "/", 0) == 0) dir = d;
    }
  }
  const std::string& fn = inst.spec->name;
  auto id = dir.empty() ? Result<uint64_t>(NotFound("no cgroup directory to key on"))
                        : BehaviourProbes::CgroupIdOf(dir);
  Status st = id.ok() ? probes_->Watch(*id, inst.pid) : id.status();
  if (!st.ok()) {
    spdlog::warn("detector: function {}: instance {:#x} is not watched: {}", fn, inst.key,
                 st.ToString());
    return;
  }
  std::lock_guard lock(mu_);
  FunctionRecord& rec = records_[fn];
  if (inst.spec->generation > rec.generation && !detector_.State(fn).empty()) {
    // Re-deployed: the old baseline is of the old code.
    spdlog::info("detector: function {}: generation {} deployed: learning a new baseline", fn,
                 inst.spec->generation);
    detector_.ForgetFunction(fn);
  }
  if (inst.spec->generation >= rec.generation) rec.generation = inst.spec->generation;
  if (detector_.State(fn).empty()) LoadProfile(fn, rec.generation);
  std::vector<std::string> allowed = inst.spec->security.allowed_paths;
  if (!inst.spec->handler.library.empty()) {
    allowed.push_back(std::filesystem::path(inst.spec->handler.library).parent_path().string() +
                      "/");
  }
  detector_.SetAllowedPaths(fn, allowed);
  Watched w;
  w.function = fn;
  w.key = inst.key;
  w.pid = inst.pid;
  w.cgroup_id = *id;
  w.on_anomaly = inst.spec->security.on_anomaly;
  w.runtime = inst.runtime;
  w.last_served = ServedBy(inst.runtime.get(), inst.key);
  w.slice_served = w.last_served;
  w.last_ns = MonotonicNs();
  rec.on_anomaly = w.on_anomaly;
  by_cgroup_[w.cgroup_id] = w.key;
  watched_[w.key] = std::move(w);
}

void BehaviourMonitor::InstanceGone(uint32_t key) {
  if (!probes_) return;
  std::lock_guard lock(mu_);
  auto it = watched_.find(key);
  if (it == watched_.end()) return;
  probes_->Unwatch(it->second.cgroup_id);
  by_cgroup_.erase(it->second.cgroup_id);
  open_events_.erase(it->second.cgroup_id);
  detector_.ForgetInstance(key);
  watched_.erase(it);
}

uint64_t BehaviourMonitor::ServedBy(const FunctionRuntime* rt, uint32_t key) {
  if (rt == nullptr) return 0;
  for (const auto& l : rt->router.Loads()) {
    if (l.instance == key) return l.served;
  }
  return 0;
}

void BehaviourMonitor::Tick() {
  if (!probes_) return;
  struct Action {
    std::string function;
    uint32_t key;
    std::string reason;
  };
  std::vector<Action> actions;
  {
    std::lock_guard lock(mu_);
    ++tick_;
    // Sampled: the slice ends with the interval (the counters read below are the slice's).
    const bool sampled = mode_ == DetectSyscalls::kSampled;
    if (sampled && probes_->syscalls_attached()) {
      probes_->DetachSyscalls();
      slice_end_ns_ = MonotonicNs();
    }
    DrainOpens();
    pid_owner_.clear();
    if (opens_ && opens_->overflows() != overflows_logged_) {
      // Once an interval at most: a storm of the node's opens filled the kernel's queue.
      overflows_logged_ = opens_->overflows();
      spdlog::warn(
          "detector: fanotify's queue overflowed ({} times since start): opens were "
          "lost, the file rule may have missed some",
          overflows_logged_);
    }
    std::map<uint64_t, std::vector<detect::Event>> events;
    events.swap(open_events_);
    probes_->Drain([&](const BehaviourEvent& ev) { events[ev.cgroup_id].push_back(ToEvent(ev)); });
    const uint64_t now = MonotonicNs();
    for (auto& [key, w] : watched_) {
      if (w.quarantined) continue;
      auto c = probes_->Read(w.cgroup_id);
      if (!c.ok()) continue;
      detect::Interval iv = Diff(*c, w.last);
      w.last = *c;
      if (sampled) {
        // The part of this instance's interval the slice covered.
        const uint64_t from = std::max(w.last_ns, slice_start_ns_);
        iv.syscall_seconds =
            slice_end_ns_ > from && slice_end_ns_ > w.last_ns ? (slice_end_ns_ - from) / 1e9 : 0;
        iv.opens = w.opens - w.last_opens;
        w.last_opens = w.opens;
      }
      auto rt = w.runtime.lock();
      const uint64_t served = rt ? ServedBy(rt.get(), key) : w.last_served;
      iv.requests = served >= w.last_served ? served - w.last_served : 0;
      if (iv.syscall_seconds > 0) {
        iv.syscall_requests = served >= w.slice_served ? served - w.slice_served : 0;
      }
      w.last_served = served;
      iv.seconds = static_cast<double>(now - w.last_ns) / 1e9;
      w.last_ns = now;
      auto found = detector_.Observe(w.function, key, tick_, iv, events[w.cgroup_id]);
      FunctionRecord& rec = records_[w.function];
      for (auto& a : found) {
        const bool quarantine = w.on_anomaly == "quarantine" && !w.quarantined;
        spdlog::warn("detector: function {}: instance {:#x} (pid {}): anomaly {}: {}; {}",
                     w.function, key, w.pid, a.kind, a.evidence,
                     quarantine ? "quarantining it (security.onAnomaly: quarantine)"
                                : "alert only (security.onAnomaly: " + w.on_anomaly + ")");
        ++anomalies_[{w.function, a.kind}];
        ++rec.total;
        AnomalyInfo info;
        info.instance = key;
        info.kind = a.kind;
        info.evidence = a.evidence;
        info.action = quarantine ? "quarantined" : "alerted";
        rec.recent.push_front(info);
        rec.found_ns.insert(rec.found_ns.begin(), now);
        if (rec.recent.size() > kRecent) {
          rec.recent.pop_back();
          rec.found_ns.pop_back();
        }
        if (quarantine) {
          w.quarantined = true;
          actions.push_back({w.function, key, "anomaly " + a.kind + ": " + a.evidence});
        }
      }
    }
    for (const auto& fn : detector_.FinishedLearning()) SaveProfile(fn);
  }
  if (mode_ == DetectSyscalls::kSampled && slice_timer_started_) ScheduleSlice();
  for (const auto& a : actions) {
    Status st = quarantine_ ? quarantine_(a.key, a.reason) : Unavailable("no quarantine hook");
    if (st.ok()) continue;
    spdlog::error("detector: function {}: instance {:#x}: quarantine failed: {}", a.function, a.key,
                  st.ToString());
    std::lock_guard lock(mu_);
    for (auto& info : records_[a.function].recent) {
      if (info.instance == a.key && info.action == "quarantined") {
        info.action = "quarantine failed: " + st.message();
      }
    }
  }
}

void BehaviourMonitor::Describe(const std::string& function, FunctionStats* stats) {
  if (!probes_) {
    stats->detector = "off: " + off_reason_;
    return;
  }
  std::lock_guard lock(mu_);
  stats->detector = detector_.State(function);
  if (stats->detector.empty()) stats->detector = "waiting for its first instance";
  auto it = records_.find(function);
  if (it == records_.end()) return;
  stats->on_anomaly = it->second.on_anomaly;
  stats->anomalies_total = it->second.total;
  const uint64_t now = MonotonicNs();
  for (size_t i = 0; i < it->second.recent.size(); ++i) {
    AnomalyInfo info = it->second.recent[i];
    info.age_s = static_cast<double>(now - it->second.found_ns[i]) / 1e9;
    stats->anomalies.push_back(std::move(info));
  }
}

size_t BehaviourMonitor::WatchedEntries() { return probes_ ? probes_->WatchedEntries() : 0; }
size_t BehaviourMonitor::SeenEntries() { return probes_ ? probes_->SeenEntries() : 0; }
size_t BehaviourMonitor::PidEntries() { return probes_ ? probes_->PidEntries() : 0; }

std::string BehaviourMonitor::MetricsText() {
  std::ostringstream out;
  out << "# HELP shoal_detector_enabled Whether the compromise detector's behaviour probes are "
         "loaded (0: off, see the log)\n# TYPE shoal_detector_enabled gauge\n"
      << "shoal_detector_enabled " << (probes_ ? 1 : 0) << "\n";
  out << "# HELP shoal_function_anomalies_total Anomalies the compromise detector found in the "
         "function's instances, by kind\n# TYPE shoal_function_anomalies_total counter\n";
  std::lock_guard lock(mu_);
  for (const auto& [k, n] : anomalies_) {
    out << "shoal_function_anomalies_total{function=\"" << Escape(k.first) << "\",kind=\""
        << Escape(k.second) << "\"} " << n << "\n";
  }
  out << "# HELP shoal_detector_watched_instances Instances the behaviour probes count\n"
         "# TYPE shoal_detector_watched_instances gauge\n"
      << "shoal_detector_watched_instances " << watched_.size() << "\n";
  if (probes_) {
    out << "# HELP shoal_detector_bpf_entries Entries of the behaviour probes' BPF maps\n"
           "# TYPE shoal_detector_bpf_entries gauge\n"
        << "shoal_detector_bpf_entries{map=\"instances\"} " << probes_->WatchedEntries() << "\n"
        << "shoal_detector_bpf_entries{map=\"seen\"} " << probes_->SeenEntries() << "\n"
        << "shoal_detector_bpf_entries{map=\"pids\"} " << probes_->PidEntries() << "\n";
  }
  if (opens_) {
    out << "# HELP shoal_detector_fanotify_opens_total Opens of the node's processes fanotify "
           "reported to the detector (an instance's or not)\n"
           "# TYPE shoal_detector_fanotify_opens_total counter\n"
        << "shoal_detector_fanotify_opens_total " << opens_->opens() << "\n"
        << "# HELP shoal_detector_fanotify_overflows_total Times fanotify's queue overflowed "
           "(opens lost)\n# TYPE shoal_detector_fanotify_overflows_total counter\n"
        << "shoal_detector_fanotify_overflows_total " << opens_->overflows() << "\n";
  }
  return out.str();
}

}  // namespace shoal
