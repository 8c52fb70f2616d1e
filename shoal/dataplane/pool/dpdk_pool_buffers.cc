// DpdkPool: allocating and releasing buffers (size-class objects on rings, large ones from the
// heap), their holders, the per-thread cache lanes, and the pool's statistics.
#include "shoal/dataplane/pool/dpdk_pool_layout.h"

namespace shoal {

template class SharedPoolBase<DpdkPool>;

using pool_detail::LastHold;

namespace {

// Which lane each thread uses, per pool object and slot: a few entries per thread, so that a
// thread working for two slots (or two pools) keeps both lanes. An entry is valid for the pool
// object of its id (ids are never reused) in the process that made it (a fork's child starts
// over: its parent's lanes are its parent's).
struct LaneMemo {
  uint64_t pool_id = 0;
  uint64_t fork_generation = 0;
  HolderSlot slot = 0;
  uint32_t lane = 0;
};
constexpr int kLaneMemos = 4;
thread_local std::array<LaneMemo, kLaneMemos> t_lanes;
thread_local int t_next_memo = 0;
std::atomic<uint64_t> g_next_pool_id{1};
uint64_t g_fork_generation = 1;
std::once_flag g_atfork_once;

}  // namespace

DpdkPool::DpdkPool(std::string name, std::unique_ptr<Mapping> mapping, bool owner)
    : SharedPoolBase(std::move(name)),
      mapping_(std::move(mapping)),
      owner_(owner),
      owner_pid_(getpid()),
      id_(g_next_pool_id.fetch_add(1, std::memory_order_relaxed)) {
  std::call_once(g_atfork_once,
                 [] { pthread_atfork(nullptr, nullptr, [] { ++g_fork_generation; }); });
}

uint32_t DpdkPool::Lane(HolderSlot slot) {
  for (const LaneMemo& e : t_lanes) {
    if (e.pool_id == id_ && e.slot == slot && e.fork_generation == g_fork_generation) {
      return e.lane;
    }
  }
  // This thread's first use of the slot: claim a free lane, else share lane 0. A claimed lane
  // stays this thread's until the slot is reclaimed (its process gone) or the pool rebuilt;
  // a thread that exits leaves its lane's few cached objects to the next ReclaimHolder.
  uint32_t lane = 0;
  for (uint32_t l = 1; l < dpdk_pool_detail::kLanes && lane == 0; ++l) {
    uint32_t free = 0;
    if (mapping_->lane(slot, l).claimed.compare_exchange_strong(free, 1,
                                                                std::memory_order_acquire)) {
      lane = l;
    }
  }
  t_lanes[t_next_memo] = {id_, g_fork_generation, slot, lane};
  t_next_memo = (t_next_memo + 1) % kLaneMemos;
  return lane;
}

PoolHeader* DpdkPool::header() const { return mapping_->header(); }

BufferHeader* DpdkPool::LiveBuffer(uint64_t offset) const {
  const Mapping& m = *mapping_;
  const PoolHeader* h = m.header();
  if (offset % kAlignment != 0 || offset < kBufferHeaderBytes || offset >= m.size) return nullptr;
  BufferHeader* b = nullptr;
  if (offset > h->heap_offset) {
    b = m.at(offset);
  } else {
    for (uint32_t c = 0; c < kNumClasses; ++c) {
      const ClassPool& cp = h->classes[c];
      if (offset <= cp.objects_offset || offset >= cp.objects_offset + cp.count * cp.stride) {
        continue;
      }
      // An object's start, checked by its own index (a multiply; the division this replaces
      // was a tenth of a round trip).
      b = m.at(offset);
      if (b->index >= cp.count ||
          cp.objects_offset + uint64_t{b->index} * cp.stride + kBufferHeaderBytes != offset) {
        return nullptr;
      }
      break;
    }
    if (b == nullptr) return nullptr;
  }
  if (b->state.load(std::memory_order_acquire) != kLive) return nullptr;
  if (b->self_offset != offset || b->capacity > m.size - offset) return nullptr;
  return b;
}

Result<uint64_t> DpdkPool::Allocate(size_t size, HolderSlot holder) {
  if (holder >= kMaxHolderSlots) return CheckSlot(holder);
  Mapping& m = *mapping_;
  PoolHeader* h = m.header();
  const uint32_t cls = dpdk_pool_detail::ClassFor(size);
  if (cls == kLargeClass) {
    if (size + kBufferHeaderBytes > h->heap_bytes) {
      return Status(StatusCode::kTooLarge, "pool " + name_ + ": " + std::to_string(size) +
                                               " bytes can never fit (largest buffer " +
                                               std::to_string(h->heap_bytes - kBufferHeaderBytes) +
                                               " bytes)");
    }
    return AllocateFromHeap(size, kLargeClass, dpdk_pool_detail::RoundUp(size, kAlignment), holder);
  }
  const ClassPool& cp = h->classes[cls];
  if (cp.count != 0) {
    uint32_t idx = 0;
    bool got = false;
    const uint32_t l = Lane(holder);
    SlotCache& c = m.lane(holder, l);
    if (cp.cache_size == 0) {
      got = rte_ring_dequeue_elem(m.ring(cls), &idx, kRingElemBytes) == 0;
      if (got) {
        SlotLock lock(c.lock, l == 0);
        dpdk_pool_detail::Add(c.used_bytes, static_cast<int64_t>(kClassBytes[cls]));
        dpdk_pool_detail::Add(c.live_buffers, 1);
      }
    } else {
      SlotLock lock(c.lock, l == 0);
      uint32_t& n = c.count[cls];
      if (n == 0) {
        n = rte_ring_dequeue_burst_elem(m.ring(cls), c.objs[cls].data(), kRingElemBytes,
                                        cp.cache_bulk, nullptr);
      }
      if (n > 0) {
        idx = c.objs[cls][--n];
        got = true;
        dpdk_pool_detail::Add(c.used_bytes, static_cast<int64_t>(kClassBytes[cls]));
        dpdk_pool_detail::Add(c.live_buffers, 1);
      }
    }
    if (got) {
      BufferHeader* b = m.object(cls, idx);
      b->holders.store(uint64_t{1} << holder, std::memory_order_relaxed);
      b->state.store(kLive, std::memory_order_release);
      return b->self_offset;
    }
  }
  // Every object of the class is taken (or the pool is too small to have any): the heap.
  return AllocateFromHeap(size, cls | kFromHeap, kClassBytes[cls], holder);
}

Result<uint64_t> DpdkPool::AllocateFromHeap(size_t size, uint32_t cls, uint64_t capacity,
                                            HolderSlot holder) {
  Mapping& m = *mapping_;
  PoolHeader* h = m.header();
  HeapLock lock(h);
  if (!lock.locked()) return Internal("pool " + name_ + ": cannot take the heap lock");
  void* p = m.heap.allocate(kBufferHeaderBytes + capacity, std::nothrow);
  if (p == nullptr) {
    h->alloc_failures.fetch_add(1, std::memory_order_relaxed);
    const PoolStats s = StatsLocked();
    return ResourceExhausted("pool " + name_ + " full: cannot fit a " + std::to_string(size) +
                             "-byte buffer (" + std::to_string(s.used_bytes) + " of " +
                             std::to_string(s.capacity_bytes) + " bytes in " +
                             std::to_string(s.live_buffers) + " live buffers)");
  }
  auto* b = new (p) BufferHeader{};
  const uint64_t offset =
      static_cast<uint64_t>(static_cast<char*>(p) - m.base) + kBufferHeaderBytes;
  b->size_class = cls;
  b->capacity = capacity;
  b->self_offset = offset;
  b->holders.store(uint64_t{1} << holder, std::memory_order_relaxed);
  b->prev = 0;
  b->next = h->heap_live_head;
  if (h->heap_live_head != 0) m.at(h->heap_live_head)->prev = offset;
  h->heap_live_head = offset;
  h->heap_used_bytes += capacity;
  ++h->heap_live_buffers;
  b->state.store(kLive, std::memory_order_release);
  return offset;
}

// Runs with the heap lock held.
void DpdkPool::FreeHeapBuffer(BufferHeader* b) {
  Mapping& m = *mapping_;
  PoolHeader* h = m.header();
  if (b->prev != 0) {
    m.at(b->prev)->next = b->next;
  } else {
    h->heap_live_head = b->next;
  }
  if (b->next != 0) m.at(b->next)->prev = b->prev;
  b->state.store(kFree, std::memory_order_release);
  h->heap_used_bytes -= b->capacity;
  --h->heap_live_buffers;
  m.heap.deallocate(b);
}

void DpdkPool::FreeObject(uint32_t cls, uint64_t offset, HolderSlot slot) {
  Mapping& m = *mapping_;
  const ClassPool& cp = m.header()->classes[cls];
  BufferHeader* b = m.at(offset);
  const uint32_t idx = b->index;
  b->state.store(kFree, std::memory_order_release);
  const auto bytes = static_cast<int64_t>(kClassBytes[cls]);
  if (slot >= kMaxHolderSlots) {
    dpdk_pool_detail::RingPut(m, cls, idx);
    m.header()->adjust_used_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    m.header()->adjust_live_buffers.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  const uint32_t l = Lane(slot);
  SlotCache& c = m.lane(slot, l);
  SlotLock lock(c.lock, l == 0);
  dpdk_pool_detail::Add(c.used_bytes, -bytes);
  dpdk_pool_detail::Add(c.live_buffers, -1);
  if (cp.cache_size == 0) {
    dpdk_pool_detail::RingPut(m, cls, idx);
    return;
  }
  uint32_t& n = c.count[cls];
  if (n >= cp.cache_size) {
    // Full: the newest half goes back to the ring in one bulk enqueue.
    n -= cp.cache_bulk;
    rte_ring_enqueue_bulk_elem(m.ring(cls), c.objs[cls].data() + n, kRingElemBytes, cp.cache_bulk,
                               nullptr);
  }
  c.objs[cls][n++] = idx;
}

Status DpdkPool::Release(uint64_t offset, HolderSlot holder) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(holder));
  BufferHeader* b = LiveBuffer(offset);
  if (b == nullptr) return pool_detail::NoLiveBuffer(name_, offset);
  const bool pooled = b->size_class < kNumClasses;
  return pool_detail::ReleaseHolder(b->holders, holder, name_, offset, "heap", [&](uint64_t& h) {
    if (pooled) {
      // A pool object: the one CAS that takes the holders to zero owns the free, lock-free.
      if (!b->holders.compare_exchange_strong(h, 0, std::memory_order_acq_rel)) {
        return LastHold::kMaskMoved;
      }
      FreeObject(b->size_class, offset, holder);
      return LastHold::kFreed;
    }
    // A heap buffer: its last hold drops under the heap lock, so a live-listed buffer that
    // nobody holds is one whose releaser died here, and ReclaimHolder frees it (as ShmPool).
    HeapLock lock(header());
    if (!lock.locked()) return LastHold::kNoLock;
    if (b->state.load(std::memory_order_acquire) != kLive) return LastHold::kFreedConcurrently;
    if (!b->holders.compare_exchange_strong(h, 0, std::memory_order_acq_rel)) {
      return LastHold::kMaskMoved;
    }
    FreeHeapBuffer(b);
    return LastHold::kFreed;
  });
}

uint64_t DpdkPool::ReclaimHolder(HolderSlot holder) {
  if (!CheckSlot(holder).ok()) return 0;
  Mapping& m = *mapping_;
  PoolHeader* h = m.header();
  const uint64_t bit = uint64_t{1} << holder;
  // The dead process's lanes go back to the rings, unclaimed for the slot's next process.
  // Lane 0's lock is taken if it comes free in a moment, else it was abandoned by the dead
  // process (nobody else uses this slot's cache).
  for (uint32_t l = 0; l < dpdk_pool_detail::kLanes; ++l) {
    SlotCache& c = m.lane(holder, l);
    for (int spins = 0; l == 0 && spins < 100000; ++spins) {
      uint32_t expected = 0;
      if (c.lock.compare_exchange_weak(expected, 1, std::memory_order_acquire)) break;
      rte_pause();
    }
    c.lock.store(1, std::memory_order_relaxed);
    for (uint32_t cls = 0; cls < kNumClasses; ++cls) {
      for (uint32_t i = 0; i < c.count[cls]; ++i) {
        dpdk_pool_detail::RingPut(m, cls, c.objs[cls][i]);
      }
      c.count[cls] = 0;
    }
    c.claimed.store(0, std::memory_order_relaxed);
    c.lock.store(0, std::memory_order_release);
  }

  uint64_t held = 0;
  for (uint32_t cls = 0; cls < kNumClasses; ++cls) {
    const ClassPool& cp = h->classes[cls];
    for (uint32_t i = 0; i < cp.count; ++i) {
      BufferHeader* b = m.object(cls, i);
      if (b->state.load(std::memory_order_acquire) != kLive) continue;
      uint64_t hs = b->holders.load(std::memory_order_acquire);
      while ((hs & bit) != 0) {
        if (b->holders.compare_exchange_weak(hs, hs & ~bit, std::memory_order_acq_rel)) {
          ++held;
          if ((hs & ~bit) == 0) FreeObject(cls, b->self_offset, kMaxHolderSlots);
          break;
        }
      }
    }
  }
  HeapLock lock(h);
  if (!lock.locked()) return held;
  uint64_t offset = h->heap_live_head;
  uint64_t budget = h->heap_live_buffers + 1;
  while (offset != 0 && budget-- > 0) {
    BufferHeader* b = m.at(offset);
    const uint64_t next = b->next;
    const uint64_t before = b->holders.fetch_and(~bit, std::memory_order_acq_rel);
    if ((before & bit) != 0) ++held;
    if ((before & ~bit) == 0) FreeHeapBuffer(b);
    offset = next;
  }
  return held;
}

std::vector<uint64_t> DpdkPool::HeldBy(HolderSlot holder) const {
  std::vector<uint64_t> out;
  if (!CheckSlot(holder).ok()) return out;
  const Mapping& m = *mapping_;
  PoolHeader* h = m.header();
  const uint64_t bit = uint64_t{1} << holder;
  for (uint32_t cls = 0; cls < kNumClasses; ++cls) {
    for (uint32_t i = 0; i < h->classes[cls].count; ++i) {
      const BufferHeader* b = m.object(cls, i);
      if (b->state.load(std::memory_order_acquire) == kLive &&
          (b->holders.load(std::memory_order_acquire) & bit) != 0) {
        out.push_back(b->self_offset);
      }
    }
  }
  HeapLock lock(h);
  if (!lock.locked()) return out;
  uint64_t offset = h->heap_live_head;
  uint64_t budget = h->heap_live_buffers + 1;
  while (offset != 0 && budget-- > 0) {
    const BufferHeader* b = m.at(offset);
    if ((b->holders.load(std::memory_order_acquire) & bit) != 0) out.push_back(offset);
    offset = b->next;
  }
  return out;
}

PoolStats DpdkPool::Stats() const {
  HeapLock lock(header());
  return StatsLocked();
}

PoolStats DpdkPool::StatsLocked() const {
  const Mapping& m = *mapping_;
  PoolHeader* h = m.header();
  int64_t class_used = h->adjust_used_bytes.load(std::memory_order_relaxed);
  int64_t class_live = h->adjust_live_buffers.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < kMaxHolderSlots * dpdk_pool_detail::kLanes; ++i) {
    class_used += m.caches()[i].used_bytes.load(std::memory_order_relaxed);
    class_live += m.caches()[i].live_buffers.load(std::memory_order_relaxed);
  }
  uint64_t class_capacity = 0;
  for (uint32_t c = 0; c < kNumClasses; ++c) class_capacity += h->classes[c].count * kClassBytes[c];
  PoolStats s;
  s.capacity_bytes = class_capacity + h->heap_bytes;
  s.used_bytes = static_cast<uint64_t>(std::max<int64_t>(class_used, 0)) + h->heap_used_bytes;
  s.live_buffers = static_cast<uint64_t>(std::max<int64_t>(class_live, 0)) + h->heap_live_buffers;
  s.free_bytes = class_capacity -
                 std::min<uint64_t>(class_capacity, std::max<int64_t>(class_used, 0)) +
                 m.heap.get_free_memory();
  s.alloc_failures = h->alloc_failures.load(std::memory_order_relaxed);
  return s;
}

}  // namespace shoal
