// The buffer-pool interface: the node's shared-memory pool of payload buffers, one pool per
// tenant. Buffers are named by their offset in the pool, so any process that attached the
// same pool can read them in place; ownership moves between processes by "holder slots"
// (one slot per attached process) and a buffer returns to the pool when no slot holds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "shoal/common/status.h"

namespace shoal {

// A process attached to a pool occupies one holder slot. Slot 0 is shoald (gateway and
// manager); instances get the slots shoald assigns them when it starts them.
using HolderSlot = uint32_t;
inline constexpr HolderSlot kShoaldSlot = 0;
inline constexpr uint32_t kMaxHolderSlots = 64;

struct PoolStats {
  uint64_t capacity_bytes = 0;  // usable bytes in the segment
  uint64_t used_bytes = 0;      // bytes in buffers currently held (by capacity, not length)
  uint64_t free_bytes = 0;
  uint64_t live_buffers = 0;
  uint64_t alloc_failures = 0;  // allocations refused because the pool was full
};

class BufferPool {
 public:
  virtual ~BufferPool() = default;

  // Allocates a buffer of at least `size` bytes held by `holder`. Returns its offset
  // (never 0), or kResourceExhausted when the pool cannot fit it (backpressure, not a crash).
  virtual Result<uint64_t> Allocate(size_t size, HolderSlot holder) = 0;

  // Where the buffer at `offset` starts in this process, and how many bytes it can hold.
  // Offsets come from other processes, so they are checked: a bad one gives an empty span.
  virtual std::span<std::byte> Data(uint64_t offset) = 0;

  // Adds `to` as a holder of the buffer and removes `from` in one step, so the buffer is held
  // by someone at every instant (used to hand a buffer to the next hop before sending its
  // descriptor).
  virtual Status Transfer(uint64_t offset, HolderSlot from, HolderSlot to) = 0;
  // Adds a holder (shared ownership: both hold it until each releases it).
  virtual Status Retain(uint64_t offset, HolderSlot holder) = 0;
  // Drops `holder`'s hold; the buffer returns to the pool when nobody holds it.
  virtual Status Release(uint64_t offset, HolderSlot holder) = 0;
  // Drops every hold of a process that died; returns how many buffers it held.
  virtual uint64_t ReclaimHolder(HolderSlot holder) = 0;

  virtual PoolStats Stats() const = 0;
  virtual const std::string& Name() const = 0;
};

}  // namespace shoal
