#include "shoal/dataplane/pool/shm_pool.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/indexes/iset_index.hpp>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>
#include <cerrno>
#include <cstring>
#include <new>

#include "shoal/dataplane/pool/holder_bits.h"
#include "shoal/dataplane/pool/robust_lock.h"
#include "shoal/dataplane/pool/warm_ahead.h"

namespace shoal {

namespace bip = boost::interprocess;

std::string PoolSegmentName(const std::string& node, const std::string& tenant) {
  return "shoal." + node + "." + tenant;
}

namespace pool_detail {

// Bumped whenever the layout below changes, so an old instance cannot misread a new pool.
constexpr uint32_t kPoolVersion = 1;
constexpr uint64_t kPoolMagic = 0x4c4f4f504c414f48ULL;  // "HOALPOOL"
constexpr uint32_t kLiveMagic = 0x5346424cU;            // "LBFS": a live buffer
constexpr uint32_t kFreeMagic = 0x46524545U;            // a block on a free list or returned

// Body sizes served from free lists; anything larger comes straight from the heap.
constexpr std::array<uint64_t, 7> kClassBytes = {256,       1024,       4096,       16 * 1024,
                                                 64 * 1024, 256 * 1024, 1024 * 1024};
constexpr uint32_t kNumClasses = kClassBytes.size();
constexpr uint32_t kLargeClass = 0xff;
// A freed heap buffer at least this large gives its pages back to the kernel (MADV_REMOVE: the
// tmpfs pages go, in every process that maps the pool): without it, a round of large updates
// leaves its pages resident after the updates are released, and the next round's buffers, which
// the best-fit heap may place elsewhere, add theirs (issue 34: a 127 MB model's round peaked at
// 17.4 x the model). A buffer allocated there later faults its pages in again (a few ms per
// 100 MB); the smaller ones stay warm.
constexpr uint64_t kReturnPagesBytes = 32ull << 20;

// The heap: Boost's best-fit allocator over the rest of the segment, with no lock of its own
// (the pool's robust mutex guards it). Buffers are named by offset, so the name index stays
// empty; iset_index rather than null_index because Boost 1.74's segment manager does not
// compile with null_index and null_mutex_family together (a header alignment assertion).
using Heap = bip::basic_managed_external_buffer<
    char, bip::rbtree_best_fit<bip::null_mutex_family, bip::offset_ptr<void>, ShmPool::kAlignment>,
    bip::iset_index>;

struct PoolHeader {
  std::atomic<uint64_t> magic;  // written last by Create, so Attach never sees half a layout
  uint32_t version;
  uint32_t header_bytes;
  uint64_t segment_bytes;
  uint64_t heap_offset;
  uint64_t heap_bytes;
  // Robust and process-shared: a process killed while holding it does not wedge the node.
  pthread_mutex_t lock;
  // Everything below is guarded by `lock`.
  uint64_t live_head;  // data offset of the first live buffer, 0 when none
  std::array<uint64_t, kNumClasses> free_heads;
  uint64_t used_bytes;
  uint64_t cached_bytes;  // capacity of blocks waiting on free lists
  uint64_t live_buffers;
  uint64_t alloc_failures;
  uint64_t lock_recoveries;
  // Last, so a pool made before it reads zeros here (the rest of the header page): lock-free.
  WarmState warm;
};
static_assert(sizeof(PoolHeader) <= ShmPool::kPoolHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "holders must be lock-free to share");
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct alignas(ShmPool::kAlignment) BufferHeader {
  std::atomic<uint32_t> magic;
  uint32_t size_class;
  uint64_t capacity;              // usable data bytes
  uint64_t self_offset;           // the data offset this header belongs to (checks forged offsets)
  std::atomic<uint64_t> holders;  // bit i set: slot i holds the buffer
  uint64_t prev;                  // live list (or free list: next only), data offsets
  uint64_t next;
};
static_assert(sizeof(BufferHeader) == ShmPool::kBufferHeaderBytes);

class Segment {
 public:
  bip::shared_memory_object shm;
  bip::mapped_region region;
  Heap heap;

  char* base() const { return static_cast<char*>(region.get_address()); }
  PoolHeader* header() const { return reinterpret_cast<PoolHeader*>(base()); }
};

namespace {

// The pool lock of a segment's header.
class LockGuard : public RobustLockGuard {
 public:
  explicit LockGuard(PoolHeader* h) : RobustLockGuard(&h->lock, &h->lock_recoveries) {}
};

uint32_t ClassFor(uint64_t size) {
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    if (size <= kClassBytes[c]) return c;
  }
  return kLargeClass;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

Status CheckName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name.find('/') != std::string::npos || name == "." ||
      name == "..") {
    return InvalidArgument("bad pool name '" + name +
                           "': want 1-200 characters without '/' (a /dev/shm file name)");
  }
  return Status::Ok();
}

Status FromBoost(const std::string& what, const bip::interprocess_exception& e) {
  int err = e.get_native_error();
  if (e.get_error_code() == bip::not_found_error) err = ENOENT;
  if (err != 0) return ErrnoStatus(what, err);
  return Internal(what + ": " + e.what());
}

}  // namespace
}  // namespace pool_detail

using pool_detail::BufferHeader;
using pool_detail::kClassBytes;
using pool_detail::kLargeClass;
using pool_detail::kNumClasses;
using pool_detail::LastHold;
using pool_detail::LockGuard;
using pool_detail::PoolHeader;
using pool_detail::Segment;

template class SharedPoolBase<ShmPool>;

ShmPool::ShmPool(std::string name, std::unique_ptr<Segment> segment, bool owner)
    : SharedPoolBase(std::move(name)),
      segment_(std::move(segment)),
      owner_(owner),
      owner_pid_(getpid()) {}

ShmPool::~ShmPool() {
  // Its thread populates the mapping. A forked child that inherited the object has no such
  // thread to stop (a fork copies only the caller).
  if (getpid() != owner_pid_) (void)warm_.release();
  warm_.reset();
  segment_.reset();  // unmaps
  // A forked child that inherited the creator's object must not unlink the node's pool.
  if (owner_ && getpid() == owner_pid_) Remove(name_);
}

void ShmPool::Remove(const std::string& name) { bip::shared_memory_object::remove(name.c_str()); }

Result<std::unique_ptr<ShmPool>> ShmPool::Create(const std::string& name, uint64_t bytes) {
  SHOAL_RETURN_IF_ERROR(pool_detail::CheckName(name));
  if (bytes < kMinSegmentBytes) {
    return InvalidArgument("pool " + name + ": " + std::to_string(bytes) +
                           " bytes is too small (minimum " + std::to_string(kMinSegmentBytes) +
                           ")");
  }
  bytes = pool_detail::RoundUp(bytes, 4096);
  Remove(name);  // a stale pool of a shoald that died
  auto seg = std::make_unique<Segment>();
  try {
    bip::permissions perm;
    perm.set_permissions(0600);
    seg->shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, perm);
    seg->shm.truncate(static_cast<bip::offset_t>(bytes));
    seg->region = bip::mapped_region(seg->shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    Remove(name);
    return pool_detail::FromBoost("creating pool /dev/shm/" + name, e);
  }

  auto* h = new (seg->base()) PoolHeader{};
  h->version = pool_detail::kPoolVersion;
  h->header_bytes = kPoolHeaderBytes;
  h->segment_bytes = bytes;
  h->heap_offset = kPoolHeaderBytes;
  h->heap_bytes = bytes - kPoolHeaderBytes;

  if (const int rc = pool_detail::InitRobustMutex(&h->lock); rc != 0) {
    Remove(name);
    return ErrnoStatus("pool " + name + ": initialising its lock", rc);
  }

  try {
    seg->heap = pool_detail::Heap(bip::create_only, seg->base() + h->heap_offset, h->heap_bytes);
  } catch (const bip::interprocess_exception& e) {
    Remove(name);
    return pool_detail::FromBoost("pool " + name + ": laying out the heap", e);
  }
  h->magic.store(pool_detail::kPoolMagic, std::memory_order_release);
  return std::unique_ptr<ShmPool>(new ShmPool(name, std::move(seg), /*owner=*/true));
}

Result<std::unique_ptr<ShmPool>> ShmPool::Attach(const std::string& name) {
  SHOAL_RETURN_IF_ERROR(pool_detail::CheckName(name));
  auto seg = std::make_unique<Segment>();
  bip::offset_t size = 0;
  try {
    seg->shm = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
    if (!seg->shm.get_size(size) || size < static_cast<bip::offset_t>(kMinSegmentBytes)) {
      return InvalidArgument("pool " + name + ": /dev/shm/" + name + " is " + std::to_string(size) +
                             " bytes, too small to be a Shoal pool");
    }
    seg->region = bip::mapped_region(seg->shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    Status st = pool_detail::FromBoost("attaching pool /dev/shm/" + name, e);
    if (st.code() == StatusCode::kNotFound) {
      return NotFound("pool " + name + " not found: no /dev/shm/" + name +
                      " (shoald creates it when the tenant's first function starts)");
    }
    return st;
  }
  const PoolHeader* h = seg->header();
  if (h->magic.load(std::memory_order_acquire) != pool_detail::kPoolMagic) {
    return InvalidArgument("pool " + name + ": /dev/shm/" + name +
                           " is not a Shoal pool (bad magic) or is still being created");
  }
  if (h->version != pool_detail::kPoolVersion) {
    return InvalidArgument("pool " + name + ": layout version " + std::to_string(h->version) +
                           ", this build reads version " +
                           std::to_string(pool_detail::kPoolVersion));
  }
  if (h->segment_bytes != static_cast<uint64_t>(size) || h->heap_offset != kPoolHeaderBytes ||
      h->heap_offset + h->heap_bytes != h->segment_bytes) {
    return InvalidArgument("pool " + name + ": header does not match the segment's size");
  }
  try {
    seg->heap = pool_detail::Heap(bip::open_only, seg->base() + h->heap_offset, h->heap_bytes);
  } catch (const bip::interprocess_exception& e) {
    return pool_detail::FromBoost("pool " + name + ": opening the heap", e);
  }
  return std::unique_ptr<ShmPool>(new ShmPool(name, std::move(seg), /*owner=*/false));
}

Result<std::unique_ptr<ShmPool>> ShmPool::CreateOrRecover(const std::string& name, uint64_t bytes,
                                                          HolderSlot keep, bool* recovered) {
  *recovered = false;
  auto old = Attach(name);
  // A pool this process may not open (another user's, no CAP_DAC_OVERRIDE) is not replaced:
  // what it holds would be lost without a word.
  if (!old.ok() && old.status().code() == StatusCode::kPermissionDenied) return old.status();
  if (old.ok() && (*old)->header()->segment_bytes == pool_detail::RoundUp(bytes, 4096)) {
    std::unique_ptr<ShmPool> pool = std::move(*old);
    pool->owner_ = true;
    for (HolderSlot slot = 0; slot < kMaxHolderSlots; ++slot) {
      if (slot != keep) pool->ReclaimHolder(slot);
    }
    *recovered = true;
    return pool;
  }
  return Create(name, bytes);
}

Status ShmPool::SetOwner(uint32_t uid, uint32_t gid) {
  const int fd = segment_->shm.get_mapping_handle().handle;
  if (fchown(fd, uid, gid) != 0) return ErrnoStatus("chown /dev/shm/" + name_, errno);
  if (fchmod(fd, 0600) != 0) return ErrnoStatus("chmod /dev/shm/" + name_, errno);
  return Status::Ok();
}

std::vector<uint64_t> ShmPool::HeldBy(HolderSlot holder) const {
  std::vector<uint64_t> out;
  if (!CheckSlot(holder).ok()) return out;
  const uint64_t bit = uint64_t{1} << holder;
  PoolHeader* h = header();
  LockGuard lock(h);
  if (!lock.locked()) return out;
  uint64_t offset = h->live_head;
  uint64_t budget = h->live_buffers + 1;
  while (offset != 0 && budget-- > 0) {
    auto* b = reinterpret_cast<BufferHeader*>(segment_->base() + offset - kBufferHeaderBytes);
    if ((b->holders.load(std::memory_order_acquire) & bit) != 0) out.push_back(offset);
    offset = b->next;
  }
  return out;
}

void* ShmPool::base() const { return segment_->base(); }
size_t ShmPool::mapped_size() const { return segment_->region.get_size(); }
PoolHeader* ShmPool::header() const { return segment_->header(); }

BufferHeader* ShmPool::LiveBuffer(uint64_t offset) const {
  const uint64_t size = mapped_size();
  if (offset < kPoolHeaderBytes + kBufferHeaderBytes || offset >= size ||
      offset % kAlignment != 0) {
    return nullptr;
  }
  auto* b = reinterpret_cast<BufferHeader*>(segment_->base() + offset - kBufferHeaderBytes);
  if (b->magic.load(std::memory_order_acquire) != pool_detail::kLiveMagic) return nullptr;
  if (b->self_offset != offset || b->capacity > size - offset) return nullptr;
  return b;
}

void ShmPool::LinkLiveLocked(uint64_t offset, BufferHeader* b) {
  PoolHeader* h = header();
  b->prev = 0;
  b->next = h->live_head;
  if (h->live_head != 0) {
    reinterpret_cast<BufferHeader*>(segment_->base() + h->live_head - kBufferHeaderBytes)->prev =
        offset;
  }
  h->live_head = offset;
}

void ShmPool::UnlinkLiveLocked(BufferHeader* b) {
  PoolHeader* h = header();
  char* base = segment_->base();
  if (b->prev != 0) {
    reinterpret_cast<BufferHeader*>(base + b->prev - kBufferHeaderBytes)->next = b->next;
  } else {
    h->live_head = b->next;
  }
  if (b->next != 0) {
    reinterpret_cast<BufferHeader*>(base + b->next - kBufferHeaderBytes)->prev = b->prev;
  }
  b->prev = b->next = 0;
}

void ShmPool::FreeLocked(uint64_t offset, BufferHeader* b) {
  PoolHeader* h = header();
  UnlinkLiveLocked(b);
  b->magic.store(pool_detail::kFreeMagic, std::memory_order_release);
  h->used_bytes -= b->capacity;
  --h->live_buffers;
  if (b->size_class < kNumClasses) {
    b->next = h->free_heads[b->size_class];
    h->free_heads[b->size_class] = offset;
    h->cached_bytes += b->capacity;
  } else {
    if (b->capacity >= pool_detail::kReturnPagesBytes) {
      const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      const auto from =
          (reinterpret_cast<uintptr_t>(segment_->base() + offset) + page - 1) & ~(page - 1);
      const auto to =
          (reinterpret_cast<uintptr_t>(segment_->base() + offset + b->capacity)) & ~(page - 1);
      // Best effort: where the kernel refuses (a hugetlbfs page straddling), the pages stay.
      if (to > from) (void)madvise(reinterpret_cast<void*>(from), to - from, MADV_REMOVE);
    }
    segment_->heap.deallocate(b);
  }
}

uint64_t ShmPool::TrimFreeListsLocked() {
  PoolHeader* h = header();
  uint64_t returned = 0;
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    while (h->free_heads[c] != 0) {
      auto* b =
          reinterpret_cast<BufferHeader*>(segment_->base() + h->free_heads[c] - kBufferHeaderBytes);
      h->free_heads[c] = b->next;
      h->cached_bytes -= b->capacity;
      returned += b->capacity;
      b->magic.store(0, std::memory_order_relaxed);
      segment_->heap.deallocate(b);
    }
  }
  return returned;
}

Result<uint64_t> ShmPool::Allocate(size_t size, HolderSlot holder) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(holder));
  PoolHeader* h = header();
  if (size > h->heap_bytes) {
    return Status(StatusCode::kTooLarge, "pool " + name_ + ": " + std::to_string(size) +
                                             " bytes can never fit (pool capacity " +
                                             std::to_string(h->heap_bytes) + " bytes)");
  }
  const uint32_t cls = pool_detail::ClassFor(size);
  const uint64_t capacity =
      cls < kNumClasses ? kClassBytes[cls] : pool_detail::RoundUp(size, kAlignment);

  LockGuard lock(h);
  if (!lock.locked()) return Internal("pool " + name_ + ": cannot take the pool lock");
  BufferHeader* b = nullptr;
  uint64_t offset = 0;
  if (cls < kNumClasses && h->free_heads[cls] != 0) {
    offset = h->free_heads[cls];
    b = reinterpret_cast<BufferHeader*>(segment_->base() + offset - kBufferHeaderBytes);
    h->free_heads[cls] = b->next;
    h->cached_bytes -= capacity;
  } else {
    // The heap's own alignment is kAlignment, so a plain allocation is aligned already.
    void* p = segment_->heap.allocate(kBufferHeaderBytes + capacity, std::nothrow);
    if (p == nullptr && TrimFreeListsLocked() > 0) {
      p = segment_->heap.allocate(kBufferHeaderBytes + capacity, std::nothrow);
    }
    if (p == nullptr) {
      ++h->alloc_failures;
      return ResourceExhausted("pool " + name_ + " full: cannot fit a " + std::to_string(size) +
                               "-byte buffer (" + std::to_string(h->used_bytes) + " of " +
                               std::to_string(h->heap_bytes) + " bytes in " +
                               std::to_string(h->live_buffers) + " live buffers)");
    }
    b = new (p) BufferHeader{};
    offset = static_cast<uint64_t>(static_cast<char*>(p) - segment_->base()) + kBufferHeaderBytes;
    b->size_class = cls;
    b->capacity = capacity;
    b->self_offset = offset;
    pool_detail::RaiseHighWater(h->warm, offset + capacity);
    if (warm_) warm_->Allocated();
  }
  b->holders.store(uint64_t{1} << holder, std::memory_order_relaxed);
  LinkLiveLocked(offset, b);
  h->used_bytes += capacity;
  ++h->live_buffers;
  b->magic.store(pool_detail::kLiveMagic, std::memory_order_release);
  return offset;
}

Status ShmPool::Release(uint64_t offset, HolderSlot holder) {
  SHOAL_RETURN_IF_ERROR(CheckSlot(holder));
  BufferHeader* b = LiveBuffer(offset);
  if (b == nullptr) return pool_detail::NoLiveBuffer(name_, offset);
  return pool_detail::ReleaseHolder(b->holders, holder, name_, offset, "pool", [&](uint64_t& h) {
    // The last holder drops it under the lock, so "nobody holds it" and "it is back on a free
    // list" change together; a live-listed buffer with no holder can only be one whose releaser
    // died inside this section, and ReclaimHolder frees those.
    LockGuard lock(header());
    if (!lock.locked()) return LastHold::kNoLock;
    if (b->magic.load(std::memory_order_acquire) != pool_detail::kLiveMagic) {
      return LastHold::kFreedConcurrently;
    }
    // Someone retained or released meanwhile: `h` is fresh, go round again.
    if (!b->holders.compare_exchange_strong(h, 0, std::memory_order_acq_rel)) {
      return LastHold::kMaskMoved;
    }
    FreeLocked(offset, b);
    return LastHold::kFreed;
  });
}

uint64_t ShmPool::ReclaimHolder(HolderSlot holder) {
  if (!CheckSlot(holder).ok()) return 0;
  const uint64_t bit = uint64_t{1} << holder;
  PoolHeader* h = header();
  LockGuard lock(h);
  if (!lock.locked()) return 0;
  uint64_t held = 0;
  uint64_t offset = h->live_head;
  // Bounded walk: a list damaged by a process killed mid-update must not loop forever.
  uint64_t budget = h->live_buffers + 1;
  while (offset != 0 && budget-- > 0) {
    auto* b = reinterpret_cast<BufferHeader*>(segment_->base() + offset - kBufferHeaderBytes);
    const uint64_t next = b->next;
    const uint64_t before = b->holders.fetch_and(~bit, std::memory_order_acq_rel);
    if ((before & bit) != 0) ++held;
    // Zero transitions only happen under this lock, so a holderless buffer here is either ours
    // now or an orphan of a releaser that died mid-release: both go back to the pool.
    if ((before & ~bit) == 0) FreeLocked(offset, b);
    offset = next;
  }
  return held;
}

PoolStats ShmPool::Stats() const {
  PoolHeader* h = header();
  PoolStats s;
  LockGuard lock(h);
  s.capacity_bytes = h->heap_bytes;
  s.used_bytes = h->used_bytes;
  s.free_bytes = segment_->heap.get_free_memory() + h->cached_bytes;
  s.live_buffers = h->live_buffers;
  s.alloc_failures = h->alloc_failures;
  return s;
}

uint64_t ShmPool::LockRecoveries() const {
  PoolHeader* h = header();
  LockGuard lock(h);
  return h->lock_recoveries;
}

Status ShmPool::StartWarmAhead(uint64_t window_bytes) {
  warm_.reset();
  if (window_bytes == 0) return Status::Ok();
  if (!owner_) {
    return InvalidArgument("pool " + name_ + ": only the process that created it warms it ahead");
  }
  PoolHeader* h = header();
  warm_ = std::make_unique<pool_detail::WarmAhead>(segment_->base(), mapped_size(), h->heap_offset,
                                                   &h->warm, window_bytes);
  return Status::Ok();
}

SharedPool::WarmMark ShmPool::Warm() const {
  const PoolHeader* h = header();
  // The sequence first: a follower that then reads an older end waits and looks again.
  const uint32_t seq = h->warm.warm_seq.load(std::memory_order_acquire);
  return {h->warm.warm_end.load(std::memory_order_acquire), seq};
}

void ShmPool::WaitWarm(uint32_t seq) const { pool_detail::WaitWarmSeq(header()->warm, seq); }

void ShmPool::WakeWarmFollowers() { pool_detail::WakeWarmWaiters(header()->warm); }

void ShmPool::LockAndAbandonForTest() {
  LockGuard lock(header());
  lock.Abandon();
}

}  // namespace shoal
