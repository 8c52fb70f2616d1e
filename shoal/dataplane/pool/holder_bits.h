// A buffer's holder bitmask (bit s: slot s holds it), changed lock-free by both pool backends
// (ShmPool, DpdkPool) with the same rules and the same error messages; only dropping the last hold
// (freeing the buffer) is each backend's own. Also the members of SharedPoolBase (shared_pool.h),
// the operations both backends run on a buffer's header through these.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "shoal/common/status.h"
#include "shoal/dataplane/pool/shared_pool.h"

namespace shoal::pool_detail {

inline Status NotHeldBy(uint32_t slot, const std::string& pool, uint64_t offset) {
  return InvalidArgument("pool " + pool + ": slot " + std::to_string(slot) +
                         " does not hold the buffer at offset " + std::to_string(offset));
}

// `to` takes the hold of `from` in one step: the count never touches zero.
inline Status TransferHolder(std::atomic<uint64_t>& holders, uint32_t from, uint32_t to,
                             const std::string& pool, uint64_t offset) {
  const uint64_t from_bit = uint64_t{1} << from;
  const uint64_t to_bit = uint64_t{1} << to;
  uint64_t h = holders.load(std::memory_order_acquire);
  for (;;) {
    if ((h & from_bit) == 0) return NotHeldBy(from, pool, offset);
    if (from == to) return Status::Ok();
    if ((h & to_bit) != 0) {
      return InvalidArgument("pool " + pool + ": slot " + std::to_string(to) +
                             " already holds the buffer at offset " + std::to_string(offset));
    }
    if (holders.compare_exchange_weak(h, (h | to_bit) & ~from_bit, std::memory_order_acq_rel)) {
      return Status::Ok();
    }
  }
}

// `holder` adds its hold to a buffer somebody holds.
inline Status RetainHolder(std::atomic<uint64_t>& holders, uint32_t holder, const std::string& pool,
                           uint64_t offset) {
  const uint64_t bit = uint64_t{1} << holder;
  uint64_t h = holders.load(std::memory_order_acquire);
  for (;;) {
    if (h == 0) {
      return InvalidArgument("pool " + pool + ": buffer at offset " + std::to_string(offset) +
                             " is not held by anyone (already freed)");
    }
    if ((h & bit) != 0) {
      return InvalidArgument("pool " + pool + ": slot " + std::to_string(holder) +
                             " already holds the buffer at offset " + std::to_string(offset));
    }
    if (holders.compare_exchange_weak(h, h | bit, std::memory_order_acq_rel)) {
      return Status::Ok();
    }
  }
}

// How a backend's last-hold step went (see ReleaseHolder).
enum class LastHold { kFreed, kMaskMoved, kNoLock, kFreedConcurrently };

// `holder` drops its hold. While others hold the buffer too that is one lock-free step; the last
// hold is dropped by `drop_last(h)` (h: the mask, only `holder`'s bit set), which takes the mask
// to zero and frees the buffer (kFreed), or finds that the mask moved under it (kMaskMoved: h
// holds the fresh one, as a failed compare_exchange leaves it, and the loop goes round), or could
// not take the backend's `lock` (kNoLock), or found the buffer freed (kFreedConcurrently).
template <class DropLast>
inline Status ReleaseHolder(std::atomic<uint64_t>& holders, uint32_t holder,
                            const std::string& pool, uint64_t offset, const char* lock,
                            DropLast&& drop_last) {
  const uint64_t bit = uint64_t{1} << holder;
  uint64_t h = holders.load(std::memory_order_acquire);
  for (;;) {
    if ((h & bit) == 0) return NotHeldBy(holder, pool, offset);
    if (h != bit) {
      // Not the last holder: lock-free.
      if (holders.compare_exchange_weak(h, h & ~bit, std::memory_order_acq_rel)) {
        return Status::Ok();
      }
      continue;
    }
    switch (drop_last(h)) {
      case LastHold::kFreed:
        return Status::Ok();
      case LastHold::kMaskMoved:
        continue;
      case LastHold::kNoLock:
        return Internal("pool " + pool + ": cannot take the " + lock + " lock");
      case LastHold::kFreedConcurrently:
        return InvalidArgument("pool " + pool + ": buffer at offset " + std::to_string(offset) +
                               " was freed concurrently");
    }
  }
}

inline Status NoLiveBuffer(const std::string& pool, uint64_t offset) {
  return InvalidArgument("pool " + pool + ": no live buffer at offset " + std::to_string(offset));
}

}  // namespace shoal::pool_detail

namespace shoal {

// SharedPoolBase's members (shared_pool.h), instantiated by each implementation's source.

template <class Impl>
Status SharedPoolBase<Impl>::CheckSlot(HolderSlot slot) const {
  if (slot < kMaxHolderSlots) return Status::Ok();
  return InvalidArgument("pool " + name_ + ": holder slot " + std::to_string(slot) +
                         " out of range (0-" + std::to_string(kMaxHolderSlots - 1) + ")");
}

template <class Impl>
std::span<std::byte> SharedPoolBase<Impl>::Data(uint64_t offset) {
  auto* b = static_cast<const Impl*>(this)->LiveBuffer(offset);
  if (b == nullptr || b->holders.load(std::memory_order_acquire) == 0) return {};
  return {reinterpret_cast<std::byte*>(b) + Impl::kBufferHeaderBytes, b->capacity};
}

template <class Impl>
uint64_t SharedPoolBase<Impl>::Holders(uint64_t offset) const {
  auto* b = static_cast<const Impl*>(this)->LiveBuffer(offset);
  return b == nullptr ? 0 : b->holders.load(std::memory_order_acquire);
}

template <class Impl>
Status SharedPoolBase<Impl>::Transfer(uint64_t offset, HolderSlot from, HolderSlot to) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(from));
  SHOAL_RETURN_IF_ERROR(CheckSlot(to));
  auto* b = static_cast<const Impl*>(this)->LiveBuffer(offset);
  if (b == nullptr) return pool_detail::NoLiveBuffer(name_, offset);
  return pool_detail::TransferHolder(b->holders, from, to, name_, offset);
}

template <class Impl>
Status SharedPoolBase<Impl>::Retain(uint64_t offset, HolderSlot holder) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(holder));
  auto* b = static_cast<const Impl*>(this)->LiveBuffer(offset);
  if (b == nullptr) return pool_detail::NoLiveBuffer(name_, offset);
  return pool_detail::RetainHolder(b->holders, holder, name_, offset);
}

}  // namespace shoal
