#include "shoal/runtime/sandbox/capabilities.h"

#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace shoal {
namespace {

std::string Name(cap_value_t c) {
  char* n = cap_to_name(c);
  std::string s = n ? n : "cap_" + std::to_string(c);
  cap_free(n);
  return s;
}

}  // namespace

std::pair<int, int> KernelRelease() {
  utsname u{};
  int major = 0, minor = 0;
  if (uname(&u) == 0) std::sscanf(u.release, "%d.%d", &major, &minor);
  return {major, minor};
}

std::vector<std::string> DaemonCapabilities(bool bind_low_port, std::pair<int, int> kernel) {
  std::vector<std::string> caps = {
      "cap_setuid",       "cap_setgid",  // a child takes its tenant's uid, gid, empty groups
      "cap_setpcap",                     // ... and empties its bounding set (and shoald its own)
      "cap_kill",                        // signal instances running under tenant uids
      "cap_chown",                       // hand a pool segment to its tenant
      "cap_fowner",                      // ... and make it 0600 once it is the tenant's
      "cap_dac_override",                // re-open a tenant-owned pool after a restart (takeover)
      "cap_bpf",          "cap_net_admin", "cap_perfmon",  // the sockmap data plane, eBPF probes
      "cap_syslog",  // read the kernel's record of a seccomp kill (/dev/kmsg)
  };
  // Older kernels: BPF needs CAP_SYS_ADMIN before 5.8 (no CAP_BPF), and BPF maps are charged
  // to RLIMIT_MEMLOCK before 5.11 (libbpf raises it). Kept only where the container has them.
  if (kernel < std::pair{5, 8}) caps.push_back("cap_sys_admin");
  if (kernel < std::pair{5, 11}) caps.push_back("cap_sys_resource");
  if (bind_low_port) caps.push_back("cap_net_bind_service");
  return caps;
}

Result<CapabilityReport> LimitCapabilities(const std::vector<std::string>& keep) {
  CapabilityReport report;
  if (geteuid() != 0) return report;
  report.root = true;
  std::vector<cap_value_t> values;
  for (const auto& n : keep) {
    cap_value_t v;
    if (cap_from_name(n.c_str(), &v) != 0) return InvalidArgument("unknown capability " + n);
    values.push_back(v);
  }
  // Only what the process holds can be kept (a container may have withheld some).
  cap_t now = cap_get_proc();
  std::vector<cap_value_t> held;
  for (cap_value_t v : values) {
    cap_flag_value_t on = CAP_CLEAR;
    if (now != nullptr && cap_get_flag(now, v, CAP_PERMITTED, &on) == 0 && on == CAP_SET) {
      held.push_back(v);
    }
  }
  cap_free(now);
  values = held;
  const cap_value_t last = static_cast<cap_value_t>(cap_max_bits()) - 1;
  for (cap_value_t c = 0; c <= last; ++c) {
    const bool kept = std::find(values.begin(), values.end(), c) != values.end();
    if (kept) {
      report.kept.push_back(Name(c));
      continue;
    }
    report.dropped.push_back(Name(c));
    // The bounding set first: dropping from it needs cap_setpcap, which may not be kept.
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) {
      return ErrnoStatus("dropping " + Name(c) + " from the bounding set", errno);
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return ErrnoStatus("clearing the ambient set", errno);
  }
  cap_t caps = cap_init();  // all clear
  if (!values.empty()) {
    cap_set_flag(caps, CAP_PERMITTED, static_cast<int>(values.size()), values.data(), CAP_SET);
    cap_set_flag(caps, CAP_EFFECTIVE, static_cast<int>(values.size()), values.data(), CAP_SET);
  }
  const int rc = cap_set_proc(caps);
  const int err = errno;
  cap_free(caps);
  if (rc != 0) return ErrnoStatus("cap_set_proc", err);
  return report;
}

std::vector<std::string> CapabilityNames(uint64_t mask) {
  std::vector<std::string> out;
  for (cap_value_t c = 0; c < 64; ++c) {
    if (mask & (uint64_t{1} << c)) out.push_back(Name(c));
  }
  return out;
}

}  // namespace shoal
