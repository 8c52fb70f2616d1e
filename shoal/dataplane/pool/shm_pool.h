// ShmPool: the Boost.Interprocess implementation of BufferPool. One POSIX shared-memory segment
// (/dev/shm/<name>, mode 0600) per tenant; shoald creates it, function instances attach to it,
// and every process reads payloads in place at the offsets they pass each other.
//
// Layout of the segment (offsets relative to the mapping's base, identical in every process):
//   [0, kPoolHeaderBytes)   PoolHeader: magic, version, robust process-shared mutex, size-class
//                           free lists, the live-buffer list head and the counters.
//   [kPoolHeaderBytes, end) a Boost rbtree_best_fit heap (managed_external_buffer, null_mutex:
//                           it runs under the pool's own robust mutex).
// Every buffer is a 64-byte BufferHeader followed by its data; the data is 64-byte aligned and
// its offset is the buffer's name. Bodies up to 1 MiB come from per-class free lists of blocks
// carved from the heap and reused; larger ones go straight to the heap and back to it.
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

// "shoal.<node>.<tenant>": the segment of one tenant's pool on one node.
std::string PoolSegmentName(const std::string& node, const std::string& tenant);

namespace pool_detail {
struct PoolHeader;
struct BufferHeader;
class Segment;
class WarmAhead;
}  // namespace pool_detail

class ShmPool final : public SharedPoolBase<ShmPool> {
 public:
  // Bytes at the start of the segment reserved for the pool header.
  static constexpr size_t kPoolHeaderBytes = 4096;
  // Every buffer's header; the data that follows is aligned to the same boundary.
  static constexpr size_t kBufferHeaderBytes = 64;
  static constexpr size_t kAlignment = 64;
  // Smallest segment Create accepts.
  static constexpr uint64_t kMinSegmentBytes = 64 * 1024;

  // shoald's side: removes a stale segment of the same name, creates /dev/shm/<name> (0600) of
  // `bytes` bytes in all and lays out an empty pool. The returned pool unlinks the segment when
  // destroyed.
  static Result<std::unique_ptr<ShmPool>> Create(const std::string& name, uint64_t bytes);
  // shoald's side after a restart: a valid pool of the same size left at /dev/shm/<name> by a
  // shoald that died (kill -9 unlinks nothing) is taken over instead of recreated, so the
  // buffers it held for the FL coordinator survive: every holder slot except `keep` belonged to
  // a process of the dead shoald and is reclaimed (the robust lock recovers if it died holding
  // it). Anything else (no segment, another size or layout) is Create. *recovered says which.
  static Result<std::unique_ptr<ShmPool>> CreateOrRecover(const std::string& name, uint64_t bytes,
                                                          HolderSlot keep, bool* recovered);
  // A function instance's side: maps an existing pool. kNotFound when there is no such segment,
  // kInvalidArgument when it is not a Shoal pool of this version, kPermissionDenied when the
  // segment belongs to another user.
  static Result<std::unique_ptr<ShmPool>> Attach(const std::string& name);
  Status SetOwner(uint32_t uid, uint32_t gid) override;
  PoolBackend backend() const override { return PoolBackend::kBoost; }
  std::string Path() const override { return "/dev/shm/" + name_; }
  // Unlinks the segment; processes that mapped it keep their mapping until they unmap it.
  static void Remove(const std::string& name);

  ~ShmPool() override;

  Result<uint64_t> Allocate(size_t size, HolderSlot holder) override;
  Status Release(uint64_t offset, HolderSlot holder) override;
  uint64_t ReclaimHolder(HolderSlot holder) override;
  PoolStats Stats() const override;

  void* base() const override;
  size_t mapped_size() const override;
  std::vector<uint64_t> HeldBy(HolderSlot holder) const override;
  uint64_t LockRecoveries() const override;
  void LockAndAbandonForTest() override;
  Status StartWarmAhead(uint64_t window_bytes) override;
  WarmMark Warm() const override;
  void WaitWarm(uint32_t seq) const override;
  void WakeWarmFollowers() override;

 private:
  friend class SharedPoolBase<ShmPool>;
  ShmPool(std::string name, std::unique_ptr<pool_detail::Segment> segment, bool owner);

  pool_detail::PoolHeader* header() const;
  // The header of the live buffer at data offset `offset`, or nullptr when the offset is bad.
  pool_detail::BufferHeader* LiveBuffer(uint64_t offset) const;

  // All of the following run with the pool lock held.
  void FreeLocked(uint64_t offset, pool_detail::BufferHeader* buffer);
  void LinkLiveLocked(uint64_t offset, pool_detail::BufferHeader* buffer);
  void UnlinkLiveLocked(pool_detail::BufferHeader* buffer);
  // Returns the cached free-list blocks to the heap so that a large request can fit.
  uint64_t TrimFreeListsLocked();

  std::unique_ptr<pool_detail::Segment> segment_;
  bool owner_;
  int owner_pid_;
  std::unique_ptr<pool_detail::WarmAhead> warm_;  // shoald's side, with pool_warm_bytes
};

extern template class SharedPoolBase<ShmPool>;

}  // namespace shoal
