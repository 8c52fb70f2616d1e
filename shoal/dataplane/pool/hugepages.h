// The node's 2 MiB hugepages, as the DPDK pool backend uses them: where hugetlbfs is mounted,
// how many pages are free, and reserving more (root only). Every function answers with a
// reason a log line can print as it is.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/common/status.h"

namespace shoal {

inline constexpr uint64_t kHugepageBytes = 2 * 1024 * 1024;
// Where hugepages are reserved and counted (the kernel's interface).
inline constexpr const char* kHugepagesSysfs = "/sys/kernel/mm/hugepages/hugepages-2048kB";

struct HugepageCounts {
  uint64_t total = 0;  // nr_hugepages
  uint64_t free = 0;   // free_hugepages, less the pages reserved by mappings not yet touched
};
Result<HugepageCounts> ReadHugepageCounts();

// The directory of a mounted 2 MiB hugetlbfs. When none is mounted and this process may mount
// (root), mounts one at /dev/hugepages, as systemd does. The answer is cached.
Result<std::string> HugetlbfsDir();

// Raises nr_hugepages to at least `pages` (never lowers it). Returns the count now reserved,
// which can be less than asked when memory is short; an error when sysfs refuses (no root).
Result<uint64_t> ReserveHugepages(uint64_t pages);

// Pages a pool of `bytes` needs (rounded up to whole pages).
inline uint64_t HugepagesFor(uint64_t bytes) {
  return (bytes + kHugepageBytes - 1) / kHugepageBytes;
}

}  // namespace shoal
