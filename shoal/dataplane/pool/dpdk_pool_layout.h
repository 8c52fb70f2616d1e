// DpdkPool's layout and the small helpers its two files share (dpdk_pool.cc: creating,
// attaching and recovering a pool file; dpdk_pool_buffers.cc: buffers, holders and lanes).
// Private to shoal_pool.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/indexes/iset_index.hpp>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>

#include "shoal/dataplane/pool/dpdk_pool.h"
#include "shoal/dataplane/pool/holder_bits.h"
#include "shoal/dataplane/pool/hugepages.h"
#include "shoal/dataplane/pool/robust_lock.h"

#ifndef SHOAL_RTE_RING_SONAME
#define SHOAL_RTE_RING_SONAME "librte_ring.so"
#endif

namespace shoal {
namespace dpdk_pool_detail {

namespace bip = boost::interprocess;

constexpr uint32_t kPoolVersion = 2;                    // 2: BufferHeader::index
constexpr uint64_t kPoolMagic = 0x4b4450444c414f48ULL;  // "HOALDPDK"
constexpr uint32_t kLive = 0x5346424cU;
constexpr uint32_t kFree = 0x46524545U;

// The same size classes as the Boost pool, so a buffer's capacity does not depend on the backend.
constexpr std::array<uint64_t, 7> kClassBytes = {256,       1024,       4096,       16 * 1024,
                                                 64 * 1024, 256 * 1024, 1024 * 1024};
constexpr uint32_t kNumClasses = kClassBytes.size();
constexpr uint32_t kLargeClass = 0xff;
// A class-sized buffer carved from the heap because its class's objects were all taken.
constexpr uint32_t kFromHeap = 0x100;
// Each class's mempool gets this fraction of the pool, at most kMaxClassShareBytes; the rest
// is the heap for updates (and for class-sized buffers once a class's objects are all taken).
// The cap keeps a large pool's memory for what fills it, updates: without it the seven classes
// held 7/32 of a 3.3 GiB FL pool (720 MiB of small-buffer objects), and a round that fits the
// Boost pool of the same size found the heap full.
constexpr uint64_t kClassShareDivisor = 32;
constexpr uint64_t kMaxClassShareBytes = uint64_t{32} << 20;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint32_t kRingElemBytes = sizeof(uint32_t);  // a ring holds object indices
// Cache lanes per holder slot: lane 0 shared (locked), the others one thread's each.
constexpr uint32_t kLanes = 4;

using Heap = bip::basic_managed_external_buffer<
    char, bip::rbtree_best_fit<bip::null_mutex_family, bip::offset_ptr<void>, DpdkPool::kAlignment>,
    bip::iset_index>;

struct ClassPool {
  uint64_t ring_offset;     // the rte_ring of free object indices
  uint64_t objects_offset;  // object i's header is at objects_offset + i * stride
  uint64_t stride;          // kBufferHeaderBytes + the class's bytes
  uint32_t count;           // 0: the pool is too small for objects of this class
  uint32_t ring_size;       // a power of two above count
  uint32_t cache_size;      // objects a slot may cache; 0: straight to the ring
  uint32_t cache_bulk;      // objects moved between cache and ring at once
};

struct PoolHeader {
  std::atomic<uint64_t> magic;  // written last by Create
  uint32_t version;
  uint32_t num_classes;
  uint64_t segment_bytes;
  uint64_t caches_offset;
  uint64_t heap_offset;
  uint64_t heap_bytes;
  std::array<ClassPool, kNumClasses> classes;
  std::atomic<uint64_t> alloc_failures;
  // Object counts changed outside a slot's cache (ReclaimHolder, recovery).
  std::atomic<int64_t> adjust_used_bytes;
  std::atomic<int64_t> adjust_live_buffers;
  pthread_mutex_t heap_lock;
  // Guarded by heap_lock.
  uint64_t heap_live_head;
  uint64_t heap_used_bytes;
  uint64_t heap_live_buffers;
  uint64_t lock_recoveries;
};
static_assert(sizeof(PoolHeader) <= kHeaderBytes);

struct alignas(DpdkPool::kAlignment) BufferHeader {
  std::atomic<uint32_t> state;  // kLive or kFree
  uint32_t size_class;          // class index, | kFromHeap, or kLargeClass
  uint64_t capacity;
  uint64_t self_offset;
  std::atomic<uint64_t> holders;
  uint64_t prev;  // heap buffers: the live list (data offsets)
  uint64_t next;
  uint32_t index;  // pool objects: the object's index in its class (checked, never divided out)
};
static_assert(sizeof(BufferHeader) == DpdkPool::kBufferHeaderBytes);

// One lane of a holder slot's cache. Only the slot's own process uses its lanes. Lane 0 is
// shared by that process's threads under a spin lock; lanes 1.. are each claimed by one thread
// (`claimed`, once) and used by it alone with no atomic read-modify-write at all: the lock's
// exchange was two of a round trip's three (measured: ~70% of its time with the holders CAS).
// The counters are this lane's share of the pool's totals.
struct alignas(DpdkPool::kAlignment) SlotCache {
  std::atomic<uint32_t> lock;
  std::atomic<uint32_t> claimed;
  std::atomic<int64_t> used_bytes;
  std::atomic<int64_t> live_buffers;
  std::array<uint32_t, kNumClasses> count;
  std::array<std::array<uint32_t, DpdkPool::kCacheSize>, kNumClasses> objs;
};

struct Mapping {
  int fd = -1;
  char* base = nullptr;
  size_t size = 0;
  std::string path;
  Heap heap;
  ~Mapping() {
    if (base != nullptr) munmap(base, size);
    if (fd >= 0) close(fd);
  }
  PoolHeader* header() const { return reinterpret_cast<PoolHeader*>(base); }
  // Every lane of every slot: slot s's lanes are caches()[s * kLanes ...].
  SlotCache* caches() const { return reinterpret_cast<SlotCache*>(base + header()->caches_offset); }
  SlotCache& lane(HolderSlot slot, uint32_t l) const { return caches()[slot * kLanes + l]; }
  rte_ring* ring(uint32_t cls) const {
    return reinterpret_cast<rte_ring*>(base + header()->classes[cls].ring_offset);
  }
  BufferHeader* object(uint32_t cls, uint32_t idx) const {
    const ClassPool& cp = header()->classes[cls];
    return reinterpret_cast<BufferHeader*>(base + cp.objects_offset + idx * cp.stride);
  }
  BufferHeader* at(uint64_t data_offset) const {
    return reinterpret_cast<BufferHeader*>(base + data_offset - DpdkPool::kBufferHeaderBytes);
  }
};

inline uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

inline uint32_t ClassFor(uint64_t size) {
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    if (size <= kClassBytes[c]) return c;
  }
  return kLargeClass;
}

inline void Add(std::atomic<int64_t>& v, int64_t d) {
  v.store(v.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

// Lane 0's lock (a spin: its threads seldom meet); a thread's own lane takes none.
class SlotLock {
 public:
  SlotLock(std::atomic<uint32_t>& l, bool take) : l_(take ? &l : nullptr) {
    if (l_ != nullptr) Take();
  }
  explicit SlotLock(std::atomic<uint32_t>& l) : SlotLock(l, true) {}
  ~SlotLock() {
    if (l_ != nullptr) l_->store(0, std::memory_order_release);
  }
  SlotLock(const SlotLock&) = delete;
  SlotLock& operator=(const SlotLock&) = delete;

 private:
  void Take() {
    std::atomic<uint32_t>& l = *l_;
    uint32_t spins = 0;
    while (l.exchange(1, std::memory_order_acquire) != 0) {
      while (l.load(std::memory_order_relaxed) != 0) {
        if (++spins < 1024) {
          rte_pause();
        } else {
          sched_yield();
        }
      }
    }
  }
  std::atomic<uint32_t>* l_;
};

class HeapLock : public pool_detail::RobustLockGuard {
 public:
  explicit HeapLock(PoolHeader* h) : RobustLockGuard(&h->heap_lock, &h->lock_recoveries) {}
};

inline Status CheckName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name.find('/') != std::string::npos || name == "." ||
      name == "..") {
    return InvalidArgument("bad pool name '" + name +
                           "': want 1-200 characters without '/' (a hugetlbfs file name)");
  }
  return Status::Ok();
}

// rte_ring_init, from librte_ring loaded at run time: only the side that lays a pool out needs
// it, and linking it would bring librte_eal and its dependencies into every instance.
using RingInitFn = int (*)(rte_ring*, const char*, unsigned, unsigned);
inline Result<RingInitFn> RingInit() {
  static RingInitFn fn = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen(SHOAL_RTE_RING_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      error = std::string("cannot load DPDK's ring library: ") + dlerror();
      return;
    }
    fn = reinterpret_cast<RingInitFn>(dlsym(lib, "rte_ring_init"));
    if (fn == nullptr) error = std::string(SHOAL_RTE_RING_SONAME " has no rte_ring_init");
  });
  if (fn == nullptr) return Unavailable(error);
  return fn;
}

inline uint64_t RingBytes(uint32_t ring_size) {
  return RoundUp(sizeof(rte_ring) + uint64_t{ring_size} * kRingElemBytes, RTE_CACHE_LINE_SIZE);
}

inline Status InitRing(Mapping& m, uint32_t cls) {
  auto init = RingInit();
  if (!init.ok()) return init.status();
  const ClassPool& cp = m.header()->classes[cls];
  const std::string ring_name = "shoal.class" + std::to_string(cls);
  if (const int rc = (*init)(m.ring(cls), ring_name.c_str(), cp.ring_size, 0); rc != 0) {
    return ErrnoStatus("rte_ring_init of class " + std::to_string(cls), -rc);
  }
  return Status::Ok();
}

inline void RingPut(Mapping& m, uint32_t cls, uint32_t idx) {
  // Never full: the ring has room for every object of its class.
  rte_ring_enqueue_elem(m.ring(cls), &idx, kRingElemBytes);
}

// The layout of a pool of `bytes` (a multiple of 2 MiB): header, slot caches, rings, each
// class's objects, then the heap.
inline void PlanLayout(PoolHeader* h, uint64_t bytes) {
  uint64_t at = kHeaderBytes;
  h->caches_offset = at;
  at += sizeof(SlotCache) * kMaxHolderSlots * kLanes;
  const uint64_t share = std::min(bytes / kClassShareDivisor, kMaxClassShareBytes);
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    ClassPool& cp = h->classes[c];
    cp.stride = DpdkPool::kBufferHeaderBytes + kClassBytes[c];
    cp.count = static_cast<uint32_t>(std::min<uint64_t>(share / cp.stride, uint64_t{1} << 24));
    cp.ring_size = std::bit_ceil(cp.count + 1);
    // A sixteenth of the class per slot cache, and at least 2 (a class of 8 1 MiB objects too:
    // without a cache each round trip was a ring dequeue and enqueue, two more atomic RMWs).
    cp.cache_size = cp.count < 8 ? 0 : std::clamp<uint32_t>(cp.count / 16, 2, DpdkPool::kCacheSize);
    cp.cache_bulk = cp.cache_size / 2;
    if (cp.cache_bulk == 0) cp.cache_size = 0;
    cp.ring_offset = at;
    at += RingBytes(cp.ring_size);
  }
  at = RoundUp(at, DpdkPool::kAlignment);
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    h->classes[c].objects_offset = at;
    at += h->classes[c].count * h->classes[c].stride;
  }
  h->heap_offset = RoundUp(at, DpdkPool::kAlignment);
  h->heap_bytes = bytes > h->heap_offset ? bytes - h->heap_offset : 0;
}

}  // namespace dpdk_pool_detail

using dpdk_pool_detail::BufferHeader;
using dpdk_pool_detail::ClassPool;
using dpdk_pool_detail::HeapLock;
using dpdk_pool_detail::kClassBytes;
using dpdk_pool_detail::kFree;
using dpdk_pool_detail::kFromHeap;
using dpdk_pool_detail::kLargeClass;
using dpdk_pool_detail::kLive;
using dpdk_pool_detail::kNumClasses;
using dpdk_pool_detail::kRingElemBytes;
using dpdk_pool_detail::Mapping;
using dpdk_pool_detail::PoolHeader;
using dpdk_pool_detail::SlotCache;
using dpdk_pool_detail::SlotLock;

}  // namespace shoal
