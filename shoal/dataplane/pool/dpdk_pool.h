// DpdkPool: the DPDK implementation of SharedPool, shaped like SPRIGHT's and LIFL's pools. Per
// size class a mempool of fixed-size objects whose free ones wait on a DPDK ring (rte_ring,
// lock-free multi-producer/multi-consumer), with a cache per holder slot in front of it as
// rte_mempool keeps one per lcore; buffers above the largest class (updates) come from a heap
// under a robust lock. All of it lives in 2 MiB hugepages: one hugetlbfs file per tenant
// (<hugetlbfs>/<name>, mode 0600, owned by the tenant), created by shoald, mapped by instances.
//
// Why not DPDK's multi-process model (EAL primary in shoald, instances as EAL secondaries):
//  - a secondary maps all of its primary's hugepage memory, so with one primary per node every
//    instance could read every tenant's buffers; per-tenant separation would need one primary
//    process (one --file-prefix) per tenant, since rte_eal_init runs once per process;
//  - a secondary runs EAL's whole start-up inside the unprivileged, seccomp-filtered instance
//    (the primary's /var/run/dpdk/<prefix>/ files, its mp unix socket, control threads, maps
//    at the primary's addresses), and would link about 20 librte_* objects into shoal-fn.
// So shoald lays the rings out in the tenant's own hugetlbfs file, which it chowns to the
// tenant like the Boost pool's /dev/shm file, and instances map that file by name. Rings hold
// object indices, not pointers, so each process may map the file at its own address.
// Instances use only rte_ring's inline enqueue/dequeue; only shoald's Create/CreateOrRecover
// call into librte_ring (rte_ring_init), loaded with dlopen so nothing links librte_*.
//
// Failure model: a holder slot's cache is used only by that slot's process; a process killed
// while holding buffers has them reclaimed by ReclaimHolder (its cache goes back to the rings).
// DPDK's rings assume no process dies inside an enqueue or dequeue (a few instructions); one
// killed there, or between dropping a buffer's last hold and caching it, can strand ring
// capacity or that buffer until CreateOrRecover, which rebuilds every ring and cache from the
// objects' own headers when shoald restarts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/dataplane/pool/shared_pool.h"

namespace shoal {

namespace dpdk_pool_detail {
struct PoolHeader;
struct BufferHeader;
struct Mapping;
}  // namespace dpdk_pool_detail

class DpdkPool final : public SharedPoolBase<DpdkPool> {
 public:
  static constexpr size_t kBufferHeaderBytes = 64;
  static constexpr size_t kAlignment = 64;
  // Smallest pool Create accepts (two hugepages: the metadata and a little room).
  static constexpr uint64_t kMinSegmentBytes = 4 * 1024 * 1024;
  // Objects a holder slot keeps in its cache per class, and how many move to or from the ring
  // at once (rte_mempool's cache size and its flush in bulk).
  static constexpr uint32_t kCacheSize = 64;
  static constexpr uint32_t kCacheBulk = 32;

  // shoald's side: creates <hugetlbfs>/<name> (0600) of `bytes` rounded up to 2 MiB pages,
  // mapped and populated now, so a shortage of hugepages is an error here (kResourceExhausted,
  // naming the pages needed and free) and never a SIGBUS later. Unlinks it when destroyed.
  static Result<std::unique_ptr<DpdkPool>> Create(const std::string& name, uint64_t bytes);
  // As ShmPool::CreateOrRecover: a valid pool of the same size left by a dead shoald is taken
  // over; the buffers `keep` holds survive and every ring and cache is rebuilt.
  static Result<std::unique_ptr<DpdkPool>> CreateOrRecover(const std::string& name, uint64_t bytes,
                                                           HolderSlot keep, bool* recovered);
  // An instance's side: maps an existing pool. kNotFound, kPermissionDenied or
  // kInvalidArgument (not a Shoal DPDK pool of this version), each naming the file.
  static Result<std::unique_ptr<DpdkPool>> Attach(const std::string& name);
  static void Remove(const std::string& name);
  // <hugetlbfs>/<name>, or an error naming why there is no hugetlbfs.
  static Result<std::string> FilePath(const std::string& name);

  ~DpdkPool() override;

  Result<uint64_t> Allocate(size_t size, HolderSlot holder) override;
  Status Release(uint64_t offset, HolderSlot holder) override;
  uint64_t ReclaimHolder(HolderSlot holder) override;
  PoolStats Stats() const override;

  PoolBackend backend() const override { return PoolBackend::kDpdk; }
  Status SetOwner(uint32_t uid, uint32_t gid) override;
  std::string Path() const override;
  void* base() const override;
  size_t mapped_size() const override;
  std::vector<uint64_t> HeldBy(HolderSlot holder) const override;
  uint64_t LockRecoveries() const override;
  void LockAndAbandonForTest() override;

 private:
  friend class SharedPoolBase<DpdkPool>;
  DpdkPool(std::string name, std::unique_ptr<dpdk_pool_detail::Mapping> mapping, bool owner);

  dpdk_pool_detail::PoolHeader* header() const;
  dpdk_pool_detail::BufferHeader* LiveBuffer(uint64_t offset) const;
  // Returns a pool object (not a heap buffer) whose last hold was just dropped, to `slot`'s
  // cache, or to its ring when `slot` is kNoSlot.
  void FreeObject(uint32_t cls, uint64_t offset, HolderSlot slot);
  Result<uint64_t> AllocateFromHeap(size_t size, uint32_t cls, uint64_t capacity,
                                    HolderSlot holder);
  void FreeHeapBuffer(dpdk_pool_detail::BufferHeader* b);  // heap lock held
  PoolStats StatsLocked() const;                           // heap lock held
  // Rebuilds every ring and cache from the objects' headers; only when no other process runs.
  Status RebuildLocked(HolderSlot keep);

  // The cache lane this thread uses for `slot` (claims one on first use; 0 is the shared one).
  uint32_t Lane(HolderSlot slot);

  std::unique_ptr<dpdk_pool_detail::Mapping> mapping_;
  bool owner_;
  int owner_pid_;
  uint64_t id_;  // this object's, unique in the process: the key of its threads' lanes
};

extern template class SharedPoolBase<DpdkPool>;

}  // namespace shoal
