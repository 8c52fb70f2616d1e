#include "shoal/sandbox/capabilities.h"

#include <sys/capability.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

std::vector<std::string> DaemonCapabilities(bool bind_low_port) {
  std::vector<std::string> caps = {
      "cap_setuid", "cap_setgid",  // a child takes its tenant's uid, gid, empty groups
      "cap_setpcap",               // ... and empties its bounding set
      "cap_kill",                  // signal instances running under tenant uids
      "cap_chown", "cap_fowner",   // hand a pool segment to its tenant, unlink a tenant's one
      "cap_dac_override",          // re-open a tenant-owned pool after a restart (takeover)
      "cap_bpf", "cap_net_admin", "cap_perfmon",  // the sockmap data plane, eBPF probes
      "cap_sys_resource",          // the BPF maps' memlock and pool sizes past the rlimit
      "cap_ipc_lock",              // pinning a pool for GPU copies (cudaHostRegister)
      "cap_syslog",                // read the kernel's record of a seccomp kill (/dev/kmsg)
  };
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
