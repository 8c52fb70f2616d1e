// DpdkPool: creating, attaching and recovering a tenant's pool file (dpdk_pool.h says why
// per-tenant hugetlbfs files and rings rather than DPDK's EAL multi-process model).
#include "shoal/dataplane/pool/dpdk_pool_layout.h"

namespace shoal {

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
      return fail(ResourceExhausted("pool " + name + ": not enough 2 MiB hugepages for " +
                                    std::to_string(bytes >> 20) + " MiB: needs " +
                                    std::to_string(HugepagesFor(bytes)) + ", " +
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
  for (uint32_t i = 0; i < kMaxHolderSlots * dpdk_pool_detail::kLanes; ++i)
    new (&m->caches()[i]) SlotCache{};
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
    m->heap = dpdk_pool_detail::Heap(boost::interprocess::create_only, m->base + h->heap_offset,
                                     h->heap_bytes);
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

Result<std::unique_ptr<DpdkPool>> DpdkPool::CreateOrRecover(const std::string& name, uint64_t bytes,
                                                            HolderSlot keep, bool* recovered) {
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
  for (uint32_t i = 0; i < kMaxHolderSlots * dpdk_pool_detail::kLanes; ++i)
    new (&m.caches()[i]) SlotCache{};
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
