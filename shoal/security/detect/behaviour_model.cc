#include "shoal/security/detect/behaviour_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "shoal/common/format_number.h"

namespace shoal::detect {
namespace {

constexpr const char* kProfileHeader = "shoal-detect-profile v1";
constexpr double kMadToSigma = 1.4826;  // MAD of a normal distribution -> its sigma
constexpr const char* kEventWords[3] = {"exec", "connect", "file"};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<long>(mid))) / 2;
  }
  return m;
}

// A feature's value with its unit, for evidence.
std::string Show(int f, double v) {
  const std::string name = Features()[f].name;
  if (name == "cpu") return FormatNumber("%.3f ms", v / 1e6);
  if (name == "bytes_sent" || name == "bytes_recv") return FormatNumber("%.0f B", v);
  return FormatNumber("%.1f", v);
}

}  // namespace

const std::array<FeatureDef, kFeatures>& Features() {
  static const std::array<FeatureDef, kFeatures> defs = {{
      {"syscalls_file", "syscalls", 2000},
      {"syscalls_net", "syscalls", 2000},
      {"syscalls_process", "syscalls", 200},
      {"syscalls_memory", "syscalls", 2000},
      {"syscalls_sync", "syscalls", 2000},
      {"syscalls_time", "syscalls", 2000},
      {"syscalls_other", "syscalls", 2000},
      {"cpu", "cpu", 0.25e9},  // ns of CPU per second: a quarter of a core
      {"forks", "process", 5},
      {"opens", "file", 200},
      {"bytes_sent", "traffic", 4 << 20},
      {"bytes_recv", "traffic", 4 << 20},
  }};
  return defs;
}

bool SyscallsCounted(const Interval& iv) { return iv.syscall_seconds != 0; }

namespace {
// Sampled: how much longer the interval is than the slice its syscalls were counted in.
double SampleScale(const Interval& iv) {
  return iv.syscall_seconds > 0 && iv.syscall_seconds < iv.seconds ? iv.seconds / iv.syscall_seconds
                                                                   : 1.0;
}
bool Sampled(const Interval& iv) {
  return iv.syscall_seconds > 0 && iv.syscall_seconds < iv.seconds;
}
}  // namespace

std::array<double, kFeatures> FeaturePer(const Interval& iv) {
  std::array<double, kFeatures> per{};
  per.fill(static_cast<double>(iv.requests) + 1.0);
  if (Sampled(iv)) {
    const double slice = static_cast<double>(iv.syscall_requests) * SampleScale(iv) + 1.0;
    for (int i = 0; i < kSyscallClasses; ++i) per[i] = slice;
  }
  return per;
}

std::array<double, kFeatures> FeatureCounts(const Interval& iv) {
  std::array<double, kFeatures> c{};
  // Sampled: the slice's counts stand for the whole interval.
  const double scale = SampleScale(iv);
  for (int i = 0; i < kSyscallClasses; ++i) c[i] = static_cast<double>(iv.syscalls[i]) * scale;
  c[kSyscallClasses + 0] = static_cast<double>(iv.cpu_ns);
  c[kSyscallClasses + 1] = static_cast<double>(iv.forks);
  c[kSyscallClasses + 2] = static_cast<double>(iv.opens);
  c[kSyscallClasses + 3] = static_cast<double>(iv.bytes_sent);
  c[kSyscallClasses + 4] = static_cast<double>(iv.bytes_recv);
  return c;
}

std::array<double, kFeatures> FeatureValues(const Interval& iv) {
  auto c = FeatureCounts(iv);
  const auto per = FeaturePer(iv);
  for (int i = 0; i < kFeatures; ++i) c[i] /= per[i];
  return c;
}

std::vector<std::string> DefaultAllowedPaths() {
  return {"/lib/",
          "/lib64/",
          "/usr/lib/",
          "/usr/lib64/",
          "/etc/ld.so.cache",
          "/etc/ld.so.preload",
          "/etc/localtime",
          "/usr/share/zoneinfo/",
          "/proc/self/",
          "/proc/thread-self/",
          "/sys/devices/system/cpu/",
          "/sys/fs/cgroup/",
          "/dev/shm/",
          "/dev/hugepages/",
          "/dev/null",
          "/dev/zero",
          "/dev/urandom",
          "/dev/random"};
}

bool PathAllowed(const std::vector<std::string>& allowed, const std::string& path) {
  for (const auto& a : allowed) {
    if (a.empty()) continue;
    if (a.back() == '/' ? path.rfind(a, 0) == 0 : path == a) return true;
  }
  return false;
}

void Baseline::Learn(uint64_t tick, const Interval& iv, const std::vector<Event>& events) {
  if (learned_) return;
  if (tick != last_tick_) {
    ++ticks_;
    last_tick_ = tick;
  }
  const auto v = FeatureValues(iv);
  for (int i = SyscallsCounted(iv) ? 0 : kSyscallClasses; i < kFeatures; ++i) {
    values_[i].push_back(v[i]);
  }
  for (const auto& e : events) seen_[static_cast<int>(e.kind)].insert(e.detail);
}

bool Baseline::Advance(uint64_t tick) {
  if (!learned_ && ticks_ >= options_.learn_intervals && tick != last_tick_) Finish();
  return learned_;
}

void Baseline::Finish() {
  for (int i = 0; i < kFeatures; ++i) {
    median_[i] = Median(values_[i]);
    std::vector<double> dev;
    dev.reserve(values_[i].size());
    for (double x : values_[i]) dev.push_back(std::abs(x - median_[i]));
    mad_[i] = Median(std::move(dev));
  }
  learned_ = true;
}

std::vector<Anomaly> Baseline::Score(const Interval& iv, const std::vector<Event>& events) const {
  std::vector<Anomaly> out;
  if (!learned_) return out;
  for (const auto& e : events) {
    const int k = static_cast<int>(e.kind);
    if (seen_[k].count(e.detail)) continue;
    if (e.kind == EventKind::kOpen && PathAllowed(options_.allowed_paths, e.detail)) continue;
    Anomaly a;
    switch (e.kind) {
      case EventKind::kExec:
        a.kind = "exec";
        a.evidence = "execve " + e.detail + " (never seen while learning)";
        break;
      case EventKind::kConnect:
        a.kind = "connect";
        a.evidence = "connect to " + e.detail + " (a destination never seen while learning)";
        break;
      case EventKind::kOpen:
        a.kind = "file";
        a.evidence = "open " + e.detail + " (outside the allowed paths, never seen while learning)";
        break;
    }
    out.push_back(std::move(a));
  }
  if (iv.execs > 0 && seen_[0].empty() && iv.events_lost > 0) {
    bool reported = false;
    for (const auto& a : out) reported = reported || a.kind == "exec";
    if (!reported) {
      out.push_back({"exec",
                     std::to_string(iv.execs) + " execve (their paths were lost: " +
                         std::to_string(iv.events_lost) + " events dropped)",
                     0});
    }
  }
  const auto values = FeatureValues(iv);
  const auto counts = FeatureCounts(iv);
  const auto per = FeaturePer(iv);
  for (int f = SyscallsCounted(iv) ? 0 : kSyscallClasses; f < kFeatures; ++f) {
    const FeatureDef& def = Features()[f];
    const double scale =
        std::max({kMadToSigma * mad_[f], options_.min_rel_scale * median_[f], 1e-9});
    const double z = (values[f] - median_[f]) / scale;
    const double excess = counts[f] - median_[f] * per[f];
    if (z <= options_.z_threshold || excess <= def.floor_per_s * std::max(iv.seconds, 0.1))
      continue;
    std::ostringstream ev;
    ev << def.name << ": " << Show(f, counts[f]) << " in " << FormatNumber("%.1f", iv.seconds)
       << " s over " << iv.requests << " request(s) = " << Show(f, values[f])
       << " per request+1; baseline median " << Show(f, median_[f]) << ", MAD " << Show(f, mad_[f])
       << "; z=" << FormatNumber("%.1f", z);
    if (f < kSyscallClasses && Sampled(iv)) {
      ev << " (sampled: counted in " << FormatNumber("%.2f", iv.syscall_seconds) << " s over "
         << iv.syscall_requests << " request(s), both scaled)";
    }
    out.push_back({def.kind, ev.str(), z});
  }
  return out;
}

std::string Baseline::Serialize() const {
  std::ostringstream out;
  out << kProfileHeader << "\n";
  out << "intervals " << ticks_ << "\n";
  char buf[160];
  for (int f = 0; f < kFeatures; ++f) {
    std::snprintf(buf, sizeof buf, "feature %s %.17g %.17g\n", Features()[f].name, median_[f],
                  mad_[f]);
    out << buf;
  }
  for (int k = 0; k < 3; ++k) {
    for (const auto& d : seen_[k]) out << kEventWords[k] << " " << d << "\n";
  }
  return out.str();
}

Result<Baseline> Baseline::Parse(const std::string& text, ModelOptions options) {
  Baseline b(std::move(options));
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kProfileHeader) {
    return InvalidArgument(std::string("not a detector profile: the first line must be '") +
                           kProfileHeader + "'");
  }
  std::array<bool, kFeatures> have{};
  int n = 1;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string word = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    auto bad = [&](const std::string& why) {
      return InvalidArgument("detector profile line " + std::to_string(n) + ": " + why);
    };
    if (word == "intervals") {
      b.ticks_ = static_cast<uint32_t>(std::strtoul(rest.c_str(), nullptr, 10));
    } else if (word == "feature") {
      std::istringstream f(rest);
      std::string name;
      double med = 0, mad = 0;
      if (!(f >> name >> med >> mad) || med < 0 || mad < 0)
        return bad("feature <name> <median> <mad>");
      int idx = -1;
      for (int i = 0; i < kFeatures; ++i) {
        if (name == Features()[i].name) idx = i;
      }
      if (idx < 0) return bad("unknown feature '" + name + "'");
      b.median_[idx] = med;
      b.mad_[idx] = mad;
      have[idx] = true;
    } else {
      int k = -1;
      for (int i = 0; i < 3; ++i) {
        if (word == kEventWords[i]) k = i;
      }
      if (k < 0 || rest.empty())
        return bad("expected feature, exec, connect or file, got '" + word + "'");
      b.seen_[k].insert(rest);
    }
  }
  for (int i = 0; i < kFeatures; ++i) {
    if (!have[i])
      return InvalidArgument(std::string("detector profile: feature ") + Features()[i].name +
                             " is missing");
  }
  b.learned_ = true;
  return b;
}

}  // namespace shoal::detect
