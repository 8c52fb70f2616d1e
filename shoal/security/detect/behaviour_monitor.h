// BehaviourMonitor: shoald's compromise detector at work. It loads the behaviour probes
// (shoal/dataplane/bpf/behaviour_probes.h) at start (logged; where they cannot load, the reason is
// logged and the detector reports itself off in the log, /metrics and `shoal describe`), watches
// each instance the manager reports ready (by its cgroup; with detect_syscalls: sampled also its
// opens through fanotify, OpenWatch, and its syscall classes in a slice of each interval only), and
// every detect_interval_ms reads each
// one's counters and events, scores them with the Detector (detector.h) and, for each anomaly:
// logs it with its evidence, counts it in shoal_function_anomalies_total{function,kind}, keeps
// it for `shoal describe`, and, where the function's manifest says security.onAnomaly:
// quarantine, has the manager quarantine the instance. A function's baseline, once learned,
// is saved to <state_dir>/detect/<function>.g<generation>.profile and read back by later
// shoalds; a re-deploy (a new generation: new code, perhaps new behaviour) learns anew.
// Runs on shoald's loop; Describe and MetricsText may be called from any thread.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/dataplane/bpf/behaviour_probes.h"
#include "shoal/runtime/node/function_runtime.h"
#include "shoal/runtime/node/instance_observer.h"
#include "shoal/security/detect/detector.h"
#include "shoal/security/detect/open_watch.h"

namespace shoal {

class BehaviourMonitor final : public InstanceObserver {
 public:
  using QuarantineFn = std::function<Status(uint32_t key, const std::string& reason)>;

  BehaviourMonitor(const NodeConfig& config, uv_loop_t* loop);
  ~BehaviourMonitor() override;

  // Loads the probes (unless config.detect is false) for instances in cgroups of
  // `cgroup_version` ("v1", "v2"; "": instances have no cgroup) and starts the interval timer.
  // Never fails: the detector is then off, and says why (logged here, then in off_reason()).
  void Start(const std::string& cgroup_version, QuarantineFn quarantine);
  // detect_syscalls: sampled watches opens through fanotify, whose marks need CAP_SYS_ADMIN:
  // shoald starts it before dropping that capability and hands it (or why it could not) here,
  // before Start. Without a call, Start tries itself.
  void SetOpenWatch(Result<std::unique_ptr<OpenWatch>> watch);
  void Stop();
  bool on() const { return probes_ != nullptr; }
  const std::string& off_reason() const { return off_reason_; }

  // InstanceObserver (the manager's loop thread, its lock held).
  void InstanceReady(const ObservedInstance& inst) override;
  void InstanceGone(uint32_t key) override;
  void Describe(const std::string& function, FunctionStats* stats) override;

  // shoal_function_anomalies_total{function,kind}, shoal_detector_enabled,
  // shoal_detector_watched_instances, shoal_detector_bpf_entries{map}.
  std::string MetricsText();
  // Entries of the probes' maps (instances, seen events, processes): 0 when off.
  size_t WatchedEntries();
  size_t SeenEntries();
  size_t PidEntries();
  // Whether fanotify watches the instances' opens (detect_syscalls: sampled and it could start).
  bool opens_watched() const { return opens_ != nullptr; }
  // One scoring interval now (the timer calls it; tests may too).
  void Tick();

 private:
  struct Watched {
    std::string function;
    uint32_t key = 0;
    int pid = 0;
    uint64_t cgroup_id = 0;
    std::string on_anomaly;
    std::weak_ptr<FunctionRuntime> runtime;
    BehaviourCounters last{};
    uint64_t last_served = 0;
    uint64_t slice_served = 0;  // sampled: served when the interval's sys_enter slice began
    uint64_t last_ns = 0;
    bool quarantined = false;
    // fanotify (sampled mode): opens counted, the paths already passed on (each once).
    uint64_t opens = 0, last_opens = 0;
    std::unordered_set<std::string> opened;
  };
  struct FunctionRecord {
    std::string on_anomaly = "alert";
    uint64_t generation = 0;         // the generation its baseline is of
    std::deque<AnomalyInfo> recent;  // newest first, at most kRecent
    std::vector<uint64_t> found_ns;
    uint64_t total = 0;
  };
  static constexpr size_t kRecent = 16;

  static uint64_t ServedBy(const FunctionRuntime* rt, uint32_t key);
  std::string ProfilePath(const std::string& function, uint64_t generation) const;
  void LoadProfile(const std::string& function, uint64_t generation);
  void SaveProfile(const std::string& function);
  // fanotify's waiting opens into the watched instances' counts and events (mu_ held).
  void DrainOpens();
  // Sampled syscalls: attaches sys_enter now (the slice's start) / schedules that.
  void AttachSlice();
  void ScheduleSlice();

  const NodeConfig& config_;
  uv_loop_t* loop_;
  QuarantineFn quarantine_;
  std::unique_ptr<BehaviourProbes> probes_;
  std::string off_reason_ = "not started";
  std::string profile_dir_;
  uv_timer_t timer_{};
  bool timer_started_ = false;
  uint64_t tick_ = 0;
  // detect_syscalls: sampled: the slice timer, and the last slice (monotonic ns).
  uv_timer_t slice_timer_{};
  bool slice_timer_started_ = false;
  uint64_t slice_start_ns_ = 0, slice_end_ns_ = 0;
  // detect_syscalls as run: sampled becomes true where fanotify cannot watch the opens.
  DetectSyscalls mode_ = DetectSyscalls::kOff;
  std::unique_ptr<OpenWatch> opens_;
  std::string opens_error_;  // why opens_ is null ("" before SetOpenWatch: Start tries)
  uint64_t overflows_logged_ = 0;
  uv_poll_t opens_poll_{};
  bool opens_poll_started_ = false;

  std::mutex mu_;  // everything below
  detect::Detector detector_;
  std::map<uint32_t, Watched> watched_;                         // by instance key
  std::map<uint64_t, uint32_t> by_cgroup_;                      // cgroup id -> instance key
  std::map<uint64_t, std::vector<detect::Event>> open_events_;  // fanotify's, by cgroup id
  std::unordered_map<int, uint64_t> pid_owner_;  // pid -> cgroup id (0: none); per tick
  std::map<std::string, FunctionRecord> records_;
  std::map<std::pair<std::string, std::string>, uint64_t> anomalies_;  // {function, kind}
};

}  // namespace shoal
