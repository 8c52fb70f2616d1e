// SharedPool: what the node needs from a tenant's shared-memory pool beyond the buffer
// operations of BufferPool (creation, ownership, inspection). Two implementations: ShmPool
// (Boost.Interprocess over /dev/shm) and DpdkPool (DPDK rings over a hugetlbfs file); see
// pool_backend.h for choosing one. Nothing outside shoal/dataplane/pool/ knows which one runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shoal/common/buffer_pool.h"
#include "shoal/common/status.h"

namespace shoal {

enum class PoolBackend { kBoost, kDpdk };

class SharedPool : public BufferPool {
 public:
  // Which implementation this is (for the log and shoal_pool_backend on /metrics).
  virtual PoolBackend backend() const = 0;
  // Gives the pool's file to the tenant's uid/gid, mode 0600, so that only the tenant's
  // instances (and shoald) can open it. Needs cap_chown.
  virtual Status SetOwner(uint32_t uid, uint32_t gid) = 0;
  // Where the pool's file lives, for the log ("/dev/shm/<name>", "/dev/hugepages/<name>").
  virtual std::string Path() const = 0;

  // The whole mapping, e.g. to register it once as pinned host memory for GPU copies.
  virtual void* base() const = 0;
  virtual size_t mapped_size() const = 0;

  // Warm-ahead (the config's pool_warm_bytes): shoald's side keeps `window_bytes` of the pool's
  // never-used memory, above its highest allocation, allocated and mapped by a background thread,
  // so bodies and partial sums land on warm pages without committing the whole pool. A pool
  // whose pages are all allocated at creation (dpdk) has nothing to do.
  virtual Status StartWarmAhead(uint64_t window_bytes) {
    (void)window_bytes;
    return {};
  }
  // What an instance follows in its own mapping: the end (offset in the mapping) below which
  // the pool's pages are allocated (the whole mapping for dpdk), and a counter that moves with it.
  struct WarmMark {
    uint64_t end = 0;
    uint32_t seq = 0;
  };
  virtual WarmMark Warm() const { return {mapped_size(), 0}; }
  // Blocks until the mark moved on from `seq` (any process's warmer) or WakeWarmFollowers ran.
  virtual void WaitWarm(uint32_t seq) const { (void)seq; }
  // Wakes every process waiting in WaitWarm (e.g. an instance stopping its follower thread).
  virtual void WakeWarmFollowers() {}

  // The bitmask of slots holding the buffer at `offset` (0 for a bad offset or a free buffer).
  virtual uint64_t Holders(uint64_t offset) const = 0;
  // The data offsets of the live buffers `holder` holds.
  virtual std::vector<uint64_t> HeldBy(HolderSlot holder) const = 0;
  // How often a process found a pool lock abandoned by a process that died holding it.
  virtual uint64_t LockRecoveries() const = 0;
  // Test hook: takes the pool lock that large allocations use and never releases it, so a test
  // can kill the process while it holds the lock and check that the others recover.
  virtual void LockAndAbandonForTest() = 0;
};

// What both implementations do alike on a buffer's header, which Impl::LiveBuffer(offset) finds
// (nullptr: no live buffer there) and which holds the holder bitmask `holders` and `capacity`, the
// data following it: checking a holder slot, transferring and retaining holds, the data's span and
// the holder mask. Defined in shoal/dataplane/pool/holder_bits.h and instantiated by each
// implementation's source, with Impl's calls resolved there (Impl is final).
template <class Impl>
class SharedPoolBase : public SharedPool {
 public:
  SharedPoolBase(const SharedPoolBase&) = delete;
  SharedPoolBase& operator=(const SharedPoolBase&) = delete;

  std::span<std::byte> Data(uint64_t offset) override;
  Status Transfer(uint64_t offset, HolderSlot from, HolderSlot to) override;
  Status Retain(uint64_t offset, HolderSlot holder) override;
  uint64_t Holders(uint64_t offset) const override;
  const std::string& Name() const override { return name_; }

 protected:
  explicit SharedPoolBase(std::string name) : name_(std::move(name)) {}
  // kInvalidArgument naming the pool and the slot when `slot` is not a holder slot.
  Status CheckSlot(HolderSlot slot) const;

  std::string name_;
};

}  // namespace shoal
