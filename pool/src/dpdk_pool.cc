#include "shoal/pool/dpdk_pool.h"

#include <dlfcn.h>
#include <pthread.h>
#include <fcntl.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/indexes/iset_index.hpp>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <bit>
#include <algorithm>

#include "holder_bits.h"
#include "robust_lock.h"
#include "shoal/pool/hugepages.h"

#ifndef SHOAL_RTE_RING_SONAME
#define SHOAL_RTE_RING_SONAME "librte_ring.so"
#endif

namespace shoal {
namespace dpdk_pool_detail {

namespace bip = boost::interprocess;

constexpr uint32_t kPoolVersion = 2;  // 2: BufferHeader::index
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
  SlotCache* caches() const {
    return reinterpret_cast<SlotCache*>(base + header()->caches_offset);
  }
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

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

uint32_t ClassFor(uint64_t size) {
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    if (size <= kClassBytes[c]) return c;
  }
  return kLargeClass;
}

void Add(std::atomic<int64_t>& v, int64_t d) {
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

Status CheckName(const std::string& name) {
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
Result<RingInitFn> RingInit() {
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

uint64_t RingBytes(uint32_t ring_size) {
  return RoundUp(sizeof(rte_ring) + uint64_t{ring_size} * kRingElemBytes, RTE_CACHE_LINE_SIZE);
}

Status InitRing(Mapping& m, uint32_t cls) {
  auto init = RingInit();
  if (!init.ok()) return init.status();
  const ClassPool& cp = m.header()->classes[cls];
  const std::string ring_name = "shoal.class" + std::to_string(cls);
  if (const int rc = (*init)(m.ring(cls), ring_name.c_str(), cp.ring_size, 0); rc != 0) {
    return ErrnoStatus("rte_ring_init of class " + std::to_string(cls), -rc);
  }
  return Status::Ok();
}

void RingPut(Mapping& m, uint32_t cls, uint32_t idx) {
  // Never full: the ring has room for every object of its class.
  rte_ring_enqueue_elem(m.ring(cls), &idx, kRingElemBytes);
}

// The layout of a pool of `bytes` (a multiple of 2 MiB): header, slot caches, rings, each
// class's objects, then the heap.
void PlanLayout(PoolHeader* h, uint64_t bytes) {
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

}  // namespace
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

Result<std::string> DpdkPool::FilePath(const std::string& name) {
  SHOAL_RETURN_IF_ERROR(dpdk_pool_detail::CheckName(name));
  auto dir = HugetlbfsDir();
  if (!dir.ok()) return Unavailable("dpdk pool " + name + ": " + dir.status().message());
  return *dir + "/" + name;
}

void DpdkPool::Remove(const std::string& name) {
  auto path = FilePath(name);
  if (path.ok()) unlink(path->c_str());
}

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
    : name_(std::move(name)),
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

DpdkPool::~DpdkPool() {
  const std::string path = mapping_->path;
  mapping_.reset();
  if (owner_ && getpid() == owner_pid_) unlink(path.c_str());
}

Result<std::unique_ptr<DpdkPool>> DpdkPool::Create(const std::string& name, uint64_t bytes) {
  auto path = FilePath(name);
  if (!path.ok()) return path.status();
  if (bytes < kMinSegmentBytes) {
    return InvalidArgument("pool " + name + ": " + std::to_string(bytes) +
                           " bytes is too small (minimum " + std::to_string(kMinSegmentBytes) +
                           ")");
  }
  SHOAL_RETURN_IF_ERROR(dpdk_pool_detail::RingInit().status());
  bytes = dpdk_pool_detail::RoundUp(bytes, kHugepageBytes);
  unlink(path->c_str());  // a stale pool of a shoald that died
  auto m = std::make_unique<Mapping>();
  m->path = *path;
  m->fd = open(path->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (m->fd < 0) return ErrnoStatus("creating pool " + *path, errno);
  auto fail = [&](Status st) {
    unlink(path->c_str());
    return st;
  };
  if (fchmod(m->fd, 0600) != 0) return fail(ErrnoStatus("chmod " + *path, errno));
  if (ftruncate(m->fd, static_cast<off_t>(bytes)) != 0) {
    return fail(ErrnoStatus("sizing pool " + *path, errno));
  }
  // MAP_POPULATE: the pages are taken now, so a shortage shows here and not as a SIGBUS later.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, m->fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (err == ENOMEM) {
      auto counts = ReadHugepageCounts();
      return fail(ResourceExhausted(
          "pool " + name + ": not enough 2 MiB hugepages for " + std::to_string(bytes >> 20) +
          " MiB: needs " + std::to_string(HugepagesFor(bytes)) + ", " +
          (counts.ok() ? std::to_string(counts->free) + " free of " +
                             std::to_string(counts->total) + " reserved"
                       : counts.status().message()) +
          " (raise " + kHugepagesSysfs + "/nr_hugepages)"));
    }
    return fail(ErrnoStatus("mapping pool " + *path, err));
  }
  m->base = static_cast<char*>(p);
  m->size = bytes;

  auto* h = new (m->base) PoolHeader{};
  h->version = dpdk_pool_detail::kPoolVersion;
  h->num_classes = kNumClasses;
  h->segment_bytes = bytes;
  dpdk_pool_detail::PlanLayout(h, bytes);
  if (h->heap_bytes < kHugepageBytes / 2) {
    return fail(InvalidArgument("pool " + name + ": " + std::to_string(bytes) +
                                " bytes leave no room for a heap"));
  }
  if (const int rc = pool_detail::InitRobustMutex(&h->heap_lock); rc != 0) {
    return fail(ErrnoStatus("pool " + name + ": initialising its lock", rc));
  }
  for (uint32_t i = 0; i < kMaxHolderSlots * dpdk_pool_detail::kLanes; ++i) new (&m->caches()[i]) SlotCache{};
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    const ClassPool& cp = h->classes[c];
    if (Status st = dpdk_pool_detail::InitRing(*m, c); !st.ok()) return fail(st);
    for (uint32_t i = 0; i < cp.count; ++i) {
      auto* b = new (m->object(c, i)) BufferHeader{};
      b->size_class = c;
      b->capacity = kClassBytes[c];
      b->index = i;
      b->self_offset = cp.objects_offset + uint64_t{i} * cp.stride + kBufferHeaderBytes;
      b->state.store(kFree, std::memory_order_relaxed);
      dpdk_pool_detail::RingPut(*m, c, i);
    }
  }
  try {
    m->heap = dpdk_pool_detail::Heap(boost::interprocess::create_only, m->base + h->heap_offset, h->heap_bytes);
  } catch (const std::exception& e) {
    return fail(Internal("pool " + name + ": laying out the heap: " + e.what()));
  }
  h->magic.store(dpdk_pool_detail::kPoolMagic, std::memory_order_release);
  return std::unique_ptr<DpdkPool>(new DpdkPool(name, std::move(m), /*owner=*/true));
}

Result<std::unique_ptr<DpdkPool>> DpdkPool::Attach(const std::string& name) {
  auto path = FilePath(name);
  if (!path.ok()) return path.status();
  auto m = std::make_unique<Mapping>();
  m->path = *path;
  m->fd = open(path->c_str(), O_RDWR | O_CLOEXEC);
  if (m->fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return NotFound("pool " + name + " not found: no " + *path +
                      " (shoald creates it when the tenant's first function starts)");
    }
    if (err == EACCES || err == EPERM) {
      return PermissionDenied("pool " + name + ": " + *path + " belongs to another user");
    }
    return ErrnoStatus("attaching pool " + *path, err);
  }
  struct stat st {};
  if (fstat(m->fd, &st) != 0) return ErrnoStatus("stat " + *path, errno);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kMinSegmentBytes) {
    return InvalidArgument("pool " + name + ": " + *path + " is " + std::to_string(size) +
                           " bytes, too small to be a Shoal DPDK pool");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mapping pool " + *path, errno);
  m->base = static_cast<char*>(p);
  m->size = size;
  const PoolHeader* h = m->header();
  if (h->magic.load(std::memory_order_acquire) != dpdk_pool_detail::kPoolMagic) {
    return InvalidArgument("pool " + name + ": " + *path +
                           " is not a Shoal pool (no DPDK pool magic) or is still being created");
  }
  if (h->version != dpdk_pool_detail::kPoolVersion || h->num_classes != kNumClasses) {
    return InvalidArgument("pool " + name + ": layout version " + std::to_string(h->version) +
                           ", this build reads version " +
                           std::to_string(dpdk_pool_detail::kPoolVersion));
  }
  // The layout is recomputed, not trusted: a damaged header must not send us out of bounds.
  PoolHeader plan{};
  dpdk_pool_detail::PlanLayout(&plan, size);
  bool same = h->segment_bytes == size && h->heap_offset == plan.heap_offset &&
              h->heap_bytes == plan.heap_bytes && h->caches_offset == plan.caches_offset;
  for (uint32_t c = 0; c < kNumClasses && same; ++c) {
    same = std::memcmp(&h->classes[c], &plan.classes[c], sizeof(ClassPool)) == 0;
  }
  if (!same) return InvalidArgument("pool " + name + ": header does not match the file's size");
  try {
    m->heap = dpdk_pool_detail::Heap(boost::interprocess::open_only, m->base + h->heap_offset,
                                     h->heap_bytes);
  } catch (const std::exception& e) {
    return Internal("pool " + name + ": opening the heap: " + e.what());
  }
  return std::unique_ptr<DpdkPool>(new DpdkPool(name, std::move(m), /*owner=*/false));
}

Result<std::unique_ptr<DpdkPool>> DpdkPool::CreateOrRecover(const std::string& name,
                                                            uint64_t bytes, HolderSlot keep,
                                                            bool* recovered) {
  *recovered = false;
  auto old = Attach(name);
  // A pool this process may not open (another user's, no CAP_DAC_OVERRIDE) is not replaced:
  // what it holds would be lost without a word.
  if (!old.ok() && old.status().code() == StatusCode::kPermissionDenied) return old.status();
  if (old.ok() && (*old)->mapping_->size == dpdk_pool_detail::RoundUp(bytes, kHugepageBytes)) {
    std::unique_ptr<DpdkPool> pool = std::move(*old);
    pool->owner_ = true;
    SHOAL_RETURN_IF_ERROR(pool->RebuildLocked(keep));
    *recovered = true;
    return pool;
  }
  return Create(name, bytes);
}

Status DpdkPool::RebuildLocked(HolderSlot keep) {
  Mapping& m = *mapping_;
  PoolHeader* h = header();
  const uint64_t keep_bit = keep < kMaxHolderSlots ? uint64_t{1} << keep : 0;
  for (uint32_t i = 0; i < kMaxHolderSlots * dpdk_pool_detail::kLanes; ++i) new (&m.caches()[i]) SlotCache{};
  int64_t used = 0;
  int64_t live = 0;
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    SHOAL_RETURN_IF_ERROR(dpdk_pool_detail::InitRing(m, c));
    for (uint32_t i = 0; i < h->classes[c].count; ++i) {
      BufferHeader* b = m.object(c, i);
      if (b->state.load(std::memory_order_acquire) == kLive) {
        const uint64_t kept = b->holders.load(std::memory_order_acquire) & keep_bit;
        b->holders.store(kept, std::memory_order_release);
        if (kept != 0) {
          used += static_cast<int64_t>(b->capacity);
          ++live;
          continue;
        }
      }
      b->state.store(kFree, std::memory_order_release);
      dpdk_pool_detail::RingPut(m, c, i);
    }
  }
  h->adjust_used_bytes.store(used);
  h->adjust_live_buffers.store(live);
  HeapLock lock(h);
  uint64_t offset = h->heap_live_head;
  uint64_t budget = h->heap_live_buffers + 1;
  while (offset != 0 && budget-- > 0) {
    BufferHeader* b = m.at(offset);
    const uint64_t next = b->next;
    const uint64_t kept = b->holders.load(std::memory_order_acquire) & keep_bit;
    b->holders.store(kept, std::memory_order_release);
    if (kept == 0) FreeHeapBuffer(b);
    offset = next;
  }
  return Status::Ok();
}

Status DpdkPool::SetOwner(uint32_t uid, uint32_t gid) {
  if (fchown(mapping_->fd, uid, gid) != 0) return ErrnoStatus("chown " + mapping_->path, errno);
  if (fchmod(mapping_->fd, 0600) != 0) return ErrnoStatus("chmod " + mapping_->path, errno);
  return Status::Ok();
}

std::string DpdkPool::Path() const { return mapping_->path; }
void* DpdkPool::base() const { return mapping_->base; }
size_t DpdkPool::mapped_size() const { return mapping_->size; }
PoolHeader* DpdkPool::header() const { return mapping_->header(); }

Status DpdkPool::CheckSlot(HolderSlot slot) const {
  if (slot >= kMaxHolderSlots) {
    return InvalidArgument("pool " + name_ + ": holder slot " + std::to_string(slot) +
                           " out of range (0-" + std::to_string(kMaxHolderSlots - 1) + ")");
  }
  return Status::Ok();
}

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
    return AllocateFromHeap(size, kLargeClass, dpdk_pool_detail::RoundUp(size, kAlignment),
                            holder);
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
    rte_ring_enqueue_bulk_elem(m.ring(cls), c.objs[cls].data() + n, kRingElemBytes,
                               cp.cache_bulk, nullptr);
  }
  c.objs[cls][n++] = idx;
}

std::span<std::byte> DpdkPool::Data(uint64_t offset) {
  BufferHeader* b = LiveBuffer(offset);
  if (b == nullptr || b->holders.load(std::memory_order_acquire) == 0) return {};
  return {reinterpret_cast<std::byte*>(mapping_->base + offset), b->capacity};
}

uint64_t DpdkPool::Holders(uint64_t offset) const {
  BufferHeader* b = LiveBuffer(offset);
  return b == nullptr ? 0 : b->holders.load(std::memory_order_acquire);
}

Status DpdkPool::Transfer(uint64_t offset, HolderSlot from, HolderSlot to) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(from));
  SHOAL_RETURN_IF_ERROR(CheckSlot(to));
  BufferHeader* b = LiveBuffer(offset);
  if (b == nullptr) {
    return InvalidArgument("pool " + name_ + ": no live buffer at offset " +
                           std::to_string(offset));
  }
  return pool_detail::TransferHolder(b->holders, from, to, name_, offset);
}

Status DpdkPool::Retain(uint64_t offset, HolderSlot holder) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(holder));
  BufferHeader* b = LiveBuffer(offset);
  if (b == nullptr) {
    return InvalidArgument("pool " + name_ + ": no live buffer at offset " +
                           std::to_string(offset));
  }
  return pool_detail::RetainHolder(b->holders, holder, name_, offset);
}

Status DpdkPool::Release(uint64_t offset, HolderSlot holder) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(holder));
  BufferHeader* b = LiveBuffer(offset);
  if (b == nullptr) {
    return InvalidArgument("pool " + name_ + ": no live buffer at offset " +
                           std::to_string(offset));
  }
  const uint64_t bit = uint64_t{1} << holder;
  const bool pooled = b->size_class < kNumClasses;
  uint64_t h = b->holders.load(std::memory_order_acquire);
  for (;;) {
    if ((h & bit) == 0) {
      return InvalidArgument("pool " + name_ + ": slot " + std::to_string(holder) +
                             " does not hold the buffer at offset " + std::to_string(offset));
    }
    if (h != bit) {
      if (b->holders.compare_exchange_weak(h, h & ~bit, std::memory_order_acq_rel)) {
        return Status::Ok();
      }
      continue;
    }
    if (pooled) {
      // A pool object: the one CAS that takes the holders to zero owns the free, lock-free.
      if (b->holders.compare_exchange_strong(h, 0, std::memory_order_acq_rel)) {
        FreeObject(b->size_class, offset, holder);
        return Status::Ok();
      }
      continue;
    }
    // A heap buffer: its last hold drops under the heap lock, so a live-listed buffer that
    // nobody holds is one whose releaser died here, and ReclaimHolder frees it (as ShmPool).
    HeapLock lock(header());
    if (!lock.locked()) return Internal("pool " + name_ + ": cannot take the heap lock");
    if (b->state.load(std::memory_order_acquire) != kLive) {
      return InvalidArgument("pool " + name_ + ": buffer at offset " + std::to_string(offset) +
                             " was freed concurrently");
    }
    if (b->holders.compare_exchange_strong(h, 0, std::memory_order_acq_rel)) {
      FreeHeapBuffer(b);
      return Status::Ok();
    }
  }
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
  s.free_bytes = class_capacity - std::min<uint64_t>(class_capacity, std::max<int64_t>(class_used, 0)) +
                 m.heap.get_free_memory();
  s.alloc_failures = h->alloc_failures.load(std::memory_order_relaxed);
  return s;
}

uint64_t DpdkPool::LockRecoveries() const {
  PoolHeader* h = header();
  HeapLock lock(h);
  return h->lock_recoveries;
}

void DpdkPool::LockAndAbandonForTest() {
  HeapLock lock(header());
  lock.Abandon();
}

}  // namespace shoal
