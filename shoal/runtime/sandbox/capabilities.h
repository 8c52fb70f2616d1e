// shoald's own capabilities: it starts as root and keeps only what running instances needs
// (switching a child to a tenant's ids, signalling it, owning pools and cgroups, the eBPF
// data plane); everything else leaves the permitted, effective, inheritable, ambient and
// bounding sets, so that neither shoald nor anything it execs can get it back.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

struct CapabilityReport {
  bool root = false;              // false: not root, nothing kept or dropped
  std::vector<std::string> kept;  // "cap_setuid", ...
  std::vector<std::string> dropped;
};

// The running kernel's {major, minor} ({0, 0} if uname cannot say).
std::pair<int, int> KernelRelease();

// The capabilities shoald keeps (README "Instance sandbox" says why each) on `kernel`.
std::vector<std::string> DaemonCapabilities(bool bind_low_port,
                                            std::pair<int, int> kernel = KernelRelease());

// Limits this process to `keep` (names as cap_from_name reads them). Capabilities are per
// thread: call it while the process has a single thread.
Result<CapabilityReport> LimitCapabilities(const std::vector<std::string>& keep);

// "cap_a,cap_b" of an effective/permitted/bounding mask as /proc/PID/status prints it (hex).
std::vector<std::string> CapabilityNames(uint64_t mask);

}  // namespace shoal
