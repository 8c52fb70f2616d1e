// Hugepages for the tests that run on the DPDK pool backend (the pool unit tests' dpdk half and
// the `dpdk.*` integration suites, where SHOAL_TEST_POOL=dpdk makes shoald run `pool: dpdk`).
// A node short of 2 MiB hugepages is a missing capability, not a failure: such a test reserves
// what it lacks (root, as scripts/test does) and, when the kernel still cannot give them, skips
// naming the pages it needed and the pages that are free.
//
// The pages a test reserves stay reserved after it (scripts/test gives them back at its end).
// ctest runs these tests one at a time (RESOURCE_LOCK hugepages), so the free pages one test
// counted are not taken by another before its shoald maps them.
//
// SHOAL_TEST_RESERVE_HUGEPAGES=0 stops the reserving (the skip path on a node with the pages
// there to reserve, and a CI run that must leave nr_hugepages alone).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "shoal/dataplane/pool/hugepages.h"
#include "shoal/dataplane/pool/pool_backend.h"

namespace shoal::testing {

// The pool backend a shoald under test runs: SHOAL_TEST_POOL ("boost" when unset).
inline std::string TestPoolBackend() {
  const char* v = std::getenv("SHOAL_TEST_POOL");
  return v != nullptr && *v != '\0' ? v : "boost";
}

// "" when `pages` free 2 MiB hugepages are there for `what` (reserving the missing ones first),
// else why not, for GTEST_SKIP.
inline std::string ShortOfHugepages(uint64_t pages, const std::string& what) {
  if (!DpdkPoolBuilt()) return "pool backend dpdk is not built (no libdpdk-dev at configure time)";
  auto dir = HugetlbfsDir();
  if (!dir.ok()) return "no hugetlbfs for the dpdk pool backend: " + dir.status().message();
  auto counts = ReadHugepageCounts();
  if (!counts.ok()) return counts.status().message();
  if (counts->free >= pages) return {};
  const char* reserve = std::getenv("SHOAL_TEST_RESERVE_HUGEPAGES");
  std::string tried = "reserving them is off (SHOAL_TEST_RESERVE_HUGEPAGES=0)";
  if (reserve == nullptr || std::string(reserve) != "0") {
    auto reserved = ReserveHugepages(counts->total + pages - counts->free);
    tried = reserved.ok() ? "the kernel reserved " + std::to_string(*reserved) + " in all"
                          : "reserving them failed: " + reserved.status().message();
    counts = ReadHugepageCounts();
    if (!counts.ok()) return counts.status().message();
    if (counts->free >= pages) return {};
  }
  return what + " needs " + std::to_string(pages) + " free 2 MiB hugepages, " +
         std::to_string(counts->free) + " are free (of " + std::to_string(counts->total) +
         " reserved; " + tried + "): skipped on the dpdk pool backend";
}

// For an integration test: "" unless shoald runs the dpdk backend (SHOAL_TEST_POOL=dpdk) and
// `tenants` pools of `pool_bytes` do not fit in the free hugepages.
inline std::string ShoaldShortOfHugepages(uint64_t pool_bytes, int tenants = 1) {
  if (TestPoolBackend() != "dpdk") return {};
  return ShortOfHugepages(HugepagesFor(pool_bytes) * tenants,
                          "this test's shoald (" + std::to_string(tenants) + " tenant pool(s) of " +
                              std::to_string(pool_bytes >> 20) + " MiB)");
}

}  // namespace shoal::testing
