// Choosing and opening a tenant pool's implementation: `pool: boost|dpdk|auto` in the node
// config. shoald creates with the backend it chose; instances attach with the one shoald names
// in SHOAL_POOL_BACKEND. Everything else holds a SharedPool and does not know which runs.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "shoal/common/status.h"
#include "shoal/dataplane/pool/shared_pool.h"

namespace shoal {

// The config's word for each: "boost", "dpdk".
std::string_view PoolBackendName(PoolBackend backend);
// "boost" or "dpdk"; anything else is kInvalidArgument naming what is accepted.
Result<PoolBackend> ParsePoolBackend(std::string_view name);

// Whether this build has the DPDK backend (libdpdk-dev was found at build time).
bool DpdkPoolBuilt();

struct PoolBackendChoice {
  PoolBackend backend = PoolBackend::kBoost;
  std::string reason;  // why, for the start-up log and shoal_pool_backend on /metrics
};
// Resolves the config's `pool` setting for pools of `pool_bytes`. "boost" is always Boost;
// "dpdk" is DPDK or an error saying what is missing (no DPDK in this build, no hugetlbfs, too
// few free hugepages for one pool); "auto" is DPDK where that would succeed, else Boost with the
// reason DPDK was not taken. `reuse_prefix` (PoolSegmentName(node, "")) names the pools a
// restarted shoald takes over: the hugepages their files hold count as free, since taking a pool
// over maps the same pages again.
Result<PoolBackendChoice> ChoosePoolBackend(std::string_view setting, uint64_t pool_bytes,
                                            std::string_view reuse_prefix = {});
// The 2 MiB pages held by the files in hugetlbfs directory `dir` whose names start with `prefix`.
uint64_t HugepagesHeldBy(const std::string& dir, std::string_view prefix);

Result<std::unique_ptr<SharedPool>> CreatePool(PoolBackend backend, const std::string& name,
                                               uint64_t bytes);
Result<std::unique_ptr<SharedPool>> CreateOrRecoverPool(PoolBackend backend,
                                                        const std::string& name, uint64_t bytes,
                                                        HolderSlot keep, bool* recovered);
Result<std::unique_ptr<SharedPool>> AttachPool(PoolBackend backend, const std::string& name);
void RemovePool(PoolBackend backend, const std::string& name);
// Whether `backend` has a file for pool `name` (/dev/shm, or the hugetlbfs mount).
bool PoolFileExists(PoolBackend backend, const std::string& name);

// Allocates every page of `pool` and maps it writable in this process (the config's
// pool_prefault), contents untouched: a pool taken over keeps what it holds. A dpdk pool is
// populated at creation already (nothing to do). kResourceExhausted when /dev/shm has no room
// for the whole pool; kUnavailable when the kernel lacks MADV_POPULATE_WRITE (Linux < 5.14).
Status PrefaultPool(SharedPool& pool);

// Installs this process's writable page-table entries for the whole mapping of `pool`, contents
// untouched. A process that maps a pool, or inherits it over a fork (an instance forked from
// its zygote: a shared mapping's entries are not copied), starts without entries and faults
// on the first touch of each page: 11.4k faults for a 46.8 MB update in 4 KiB pages. Meant for
// a pool whose pages are all allocated (a pre-faulted Boost pool: about 0.1-0.2 s per GiB here,
// so instances run it beside their work; a dpdk pool: 0.2 ms for 2 GiB); on a sparse Boost
// pool it would allocate every page. kUnavailable without MADV_POPULATE_WRITE (Linux < 5.14).
Status PopulatePoolMapping(SharedPool& pool);
// The same for the pages of [offset, offset + bytes) of the mapping (widened to whole pages),
// e.g. what shoald's warm-ahead has allocated (SharedPool::Warm). kInvalidArgument naming the
// range when it runs past the pool's end.
Status PopulatePoolRange(SharedPool& pool, uint64_t offset, uint64_t bytes);

}  // namespace shoal
