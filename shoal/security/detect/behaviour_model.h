// The compromise detector's model: what one instance did in one scoring interval (Interval and
// its Events), what a function normally does (Baseline, learned from its first intervals or
// read from a saved profile), and how an interval is scored against it.
//
// Why this model. A compromised function shows post-exploitation behaviour that its code never
// shows: it runs a program (execve), talks to a new peer (connect), reads a file it has no
// business reading, or turns into a miner or a flooder (CPU, syscalls, bytes far beyond its
// per-request norm). "Detection of Compromised Functions in a Serverless Cloud Environment"
// finds these from monitoring data alone; we keep its two ingredients in their simplest
// explainable form, which also needs no training data beyond the function's own first minutes:
//  * Hard rules for never-seen events: an execve of a path, a connect to a destination, or an
//    open of a path outside the function's allowed paths that the baseline never saw is an
//    anomaly at once (kinds exec, connect, file). A function whose code does none of these
//    has an empty set, so the first one is caught with no false alarm from noise.
//  * Per-feature robust z-scores for rates: each counter (syscalls by class, CPU time, forks,
//    socket bytes sent/received) is divided by (requests served + 1) in the interval, so that
//    the feature measures work per request and does not alarm when the load changes; the
//    baseline keeps each feature's median and MAD (median absolute deviation, scaled by 1.4826
//    to estimate a standard deviation), which a few odd learning intervals cannot drag the way
//    they drag a mean and a standard deviation. An interval is anomalous in a feature when its
//    z-score exceeds `z_threshold` AND the excess over the baseline is above an absolute floor
//    per second (so that a feature whose baseline is ~0 does not alarm on a handful of calls).
//    The scale has a floor of a fraction of the median (`min_rel_scale`) for the same reason.
// The kinds reported are exec, connect, file (rules) and cpu, syscalls, traffic, process (rates).
// What it does not do: it does not adapt after learning (drift is a re-learn: delete the
// profile), and an attack during the learning period is learned as normal (use a saved
// profile learned on clean traffic for that).
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::detect {

// Syscall classes, as the behaviour probes count them (behaviour_abi.h SHOAL_BHV_CLASS_*).
inline constexpr int kSyscallClasses = 7;
inline constexpr const char* kSyscallClassNames[kSyscallClasses] = {
    "file", "net", "process", "memory", "sync", "time", "other"};

// One instance over one scoring interval (counter differences).
struct Interval {
  double seconds = 0;
  uint64_t requests = 0;  // requests it finished in the interval
  std::array<uint64_t, kSyscallClasses> syscalls{};
  // Seconds of the interval in which `syscalls` were counted: < 0 the whole interval; sampled
  // (detect_syscalls: sampled) the counts and the requests finished in that slice
  // (syscall_requests) are both scaled by seconds / syscall_seconds to estimate the interval's
  // (so a slice that saw the load while most of the interval was idle is no anomaly); 0: not
  // counted at all in this interval (the syscall features are then neither learned nor scored).
  double syscall_seconds = -1;
  uint64_t syscall_requests = 0;
  uint64_t execs = 0, connects = 0, opens = 0, forks = 0;
  uint64_t bytes_sent = 0, bytes_recv = 0;
  uint64_t cpu_ns = 0;
  uint64_t events_lost = 0;
};

enum class EventKind { kExec, kConnect, kOpen };
struct Event {
  EventKind kind;
  std::string detail;  // exec/open: the path; connect: "127.0.0.1:8080", "[::1]:80", "unix:/p"
};

struct Anomaly {
  std::string kind;      // exec, connect, file, cpu, syscalls, traffic, process
  std::string evidence;  // what was seen against what is normal, for the log and describe
  double score = 0;      // z-score (rates) or 0 (rules)
};

struct ModelOptions {
  uint32_t learn_intervals = 12;  // intervals of the function before it is scored
  double z_threshold = 8.0;
  double min_rel_scale = 0.25;  // the scale is at least this fraction of the median
  // Paths a function may open without having opened them while learning (prefixes; a prefix
  // ending in '/' matches below it, else the exact path).
  std::vector<std::string> allowed_paths;
};

// The features scored as rates: name, kind reported, absolute floor of the excess per second.
struct FeatureDef {
  const char* name;
  const char* kind;
  double floor_per_s;
};
inline constexpr int kFeatures = kSyscallClasses + 5;
const std::array<FeatureDef, kFeatures>& Features();
// An interval's feature values (counter / (requests + 1)) and raw counters, in Features() order;
// sampled syscall counts scaled to the whole interval (Interval::syscall_seconds).
std::array<double, kFeatures> FeatureValues(const Interval& iv);
std::array<double, kFeatures> FeatureCounts(const Interval& iv);
// Whether the interval's syscall classes were counted at all (syscall_seconds != 0).
bool SyscallsCounted(const Interval& iv);
// What each feature's count is divided by: requests + 1 (the syscall features of a sampled
// interval: the slice's requests scaled to the interval, + 1).
std::array<double, kFeatures> FeaturePer(const Interval& iv);

// The default allowed paths: the loader, shared libraries, the process's own /proc entries,
// the pools' /dev/shm, the usual character devices and the time zone database.
std::vector<std::string> DefaultAllowedPaths();
bool PathAllowed(const std::vector<std::string>& allowed, const std::string& path);

class Baseline {
 public:
  explicit Baseline(ModelOptions options) : options_(std::move(options)) {}

  // Learning: adds an interval and its events (an interval of the function's tick `tick`; its
  // instances' intervals of one tick share it).
  void Learn(uint64_t tick, const Interval& iv, const std::vector<Event>& events);
  // Called before a tick's first interval: after `learn_intervals` ticks were learned, the
  // baseline is computed and this returns true (scoring from this tick on).
  bool Advance(uint64_t tick);
  bool learned() const { return learned_; }
  uint32_t ticks_learned() const { return ticks_; }
  // Intervals learned (the CPU feature's: syscall features may have fewer when sampled).
  uint32_t samples() const { return static_cast<uint32_t>(values_[kSyscallClasses].size()); }

  // Scoring (learned() only): the anomalies in the interval, each event rule once per event.
  std::vector<Anomaly> Score(const Interval& iv, const std::vector<Event>& events) const;

  // The profile as text (learned() only), and back: "shoal-detect-profile v1", then
  // "feature <name> <median> <mad>" lines and "exec|connect|file <detail>" lines.
  std::string Serialize() const;
  static Result<Baseline> Parse(const std::string& text, ModelOptions options);

  const std::set<std::string>& seen(EventKind k) const { return seen_[static_cast<int>(k)]; }
  double median(int feature) const { return median_[feature]; }
  double mad(int feature) const { return mad_[feature]; }

 private:
  void Finish();

  ModelOptions options_;
  bool learned_ = false;
  uint32_t ticks_ = 0;
  uint64_t last_tick_ = UINT64_MAX;
  std::array<std::vector<double>, kFeatures> values_;
  std::array<double, kFeatures> median_{};
  std::array<double, kFeatures> mad_{};
  std::array<std::set<std::string>, 3> seen_;
};

}  // namespace shoal::detect
