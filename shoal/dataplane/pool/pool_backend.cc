#include "shoal/dataplane/pool/pool_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "shoal/dataplane/pool/hugepages.h"
#include "shoal/dataplane/pool/shm_pool.h"
#ifdef SHOAL_WITH_DPDK
#include "shoal/dataplane/pool/dpdk_pool.h"
#endif

namespace shoal {
namespace {

[[maybe_unused]] Status NotBuilt() {
  return Unavailable(
      "pool backend dpdk: this build has no DPDK (libdpdk-dev was not found when it was "
      "configured); use pool: boost or auto");
}

template <typename T>
Result<std::unique_ptr<SharedPool>> Up(Result<std::unique_ptr<T>> r) {
  if (!r.ok()) return r.status();
  return std::unique_ptr<SharedPool>(std::move(*r));
}

}  // namespace

std::string_view PoolBackendName(PoolBackend backend) {
  return backend == PoolBackend::kDpdk ? "dpdk" : "boost";
}

Result<PoolBackend> ParsePoolBackend(std::string_view name) {
  if (name == "boost") return PoolBackend::kBoost;
  if (name == "dpdk") return PoolBackend::kDpdk;
  return InvalidArgument("pool backend '" + std::string(name) + "': want boost or dpdk");
}

bool DpdkPoolBuilt() {
#ifdef SHOAL_WITH_DPDK
  return true;
#else
  return false;
#endif
}

uint64_t HugepagesHeldBy(const std::string& dir, std::string_view prefix) {
  if (prefix.empty()) return 0;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  uint64_t bytes = 0;
  while (dirent* e = readdir(d)) {
    if (!std::string_view(e->d_name).starts_with(prefix)) continue;
    struct stat st {};
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;  // the pages it holds, not its size
    }
  }
  closedir(d);
  return bytes / kHugepageBytes;
}

Result<PoolBackendChoice> ChoosePoolBackend(std::string_view setting, uint64_t pool_bytes,
                                            std::string_view reuse_prefix) {
  if (setting == "boost") return PoolBackendChoice{PoolBackend::kBoost, "configured (pool: boost)"};
  if (setting != "dpdk" && setting != "auto") {
    return InvalidArgument("config: pool: '" + std::string(setting) +
                           "': want boost, dpdk or auto");
  }
  const bool forced = setting == "dpdk";
  auto refuse = [&](const std::string& why) -> Result<PoolBackendChoice> {
    if (forced) return Unavailable("pool: dpdk: " + why);
    return PoolBackendChoice{PoolBackend::kBoost, "auto: not dpdk because " + why};
  };
  if (!DpdkPoolBuilt()) return refuse("this build has no DPDK (libdpdk-dev not found)");
  auto dir = HugetlbfsDir();
  if (!dir.ok()) return refuse(dir.status().message());
  auto counts = ReadHugepageCounts();
  if (!counts.ok()) return refuse(counts.status().message());
  const uint64_t need = HugepagesFor(pool_bytes);
  const uint64_t held = HugepagesHeldBy(*dir, reuse_prefix);
  const std::string held_text =
      held == 0 ? "" : " + " + std::to_string(held) + " held by this node's pools to take over";
  if (counts->free + held < need) {
    return refuse(std::to_string(counts->free) + " free 2 MiB hugepages (of " +
                  std::to_string(counts->total) + ")" + held_text +
                  " are fewer than one tenant pool of " + std::to_string(pool_bytes >> 20) +
                  " MiB needs (" + std::to_string(need) + "); reserve them in " + kHugepagesSysfs +
                  "/nr_hugepages");
  }
  return PoolBackendChoice{
      PoolBackend::kDpdk,
      std::string(forced ? "configured (pool: dpdk)" : "auto: hugepages configured") + ": " +
          std::to_string(counts->free) + " free 2 MiB hugepages" + held_text + " at " + *dir +
          ", " + std::to_string(need) + " per tenant pool"};
}

Result<std::unique_ptr<SharedPool>> CreatePool(PoolBackend backend, const std::string& name,
                                               uint64_t bytes) {
  if (backend == PoolBackend::kBoost) return Up(ShmPool::Create(name, bytes));
#ifdef SHOAL_WITH_DPDK
  return Up(DpdkPool::Create(name, bytes));
#else
  return NotBuilt();
#endif
}

Result<std::unique_ptr<SharedPool>> CreateOrRecoverPool(PoolBackend backend,
                                                        const std::string& name, uint64_t bytes,
                                                        HolderSlot keep, bool* recovered) {
  if (backend == PoolBackend::kBoost) {
    return Up(ShmPool::CreateOrRecover(name, bytes, keep, recovered));
  }
#ifdef SHOAL_WITH_DPDK
  return Up(DpdkPool::CreateOrRecover(name, bytes, keep, recovered));
#else
  *recovered = false;
  return NotBuilt();
#endif
}

Result<std::unique_ptr<SharedPool>> AttachPool(PoolBackend backend, const std::string& name) {
  if (backend == PoolBackend::kBoost) return Up(ShmPool::Attach(name));
#ifdef SHOAL_WITH_DPDK
  return Up(DpdkPool::Attach(name));
#else
  return NotBuilt();
#endif
}

void RemovePool(PoolBackend backend, const std::string& name) {
  if (backend == PoolBackend::kBoost) {
    ShmPool::Remove(name);
    return;
  }
#ifdef SHOAL_WITH_DPDK
  DpdkPool::Remove(name);
#endif
}

bool PoolFileExists(PoolBackend backend, const std::string& name) {
  std::string path = "/dev/shm/" + name;
  if (backend == PoolBackend::kDpdk) {
    if (!DpdkPoolBuilt()) return false;
    auto dir = HugetlbfsDir();
    if (!dir.ok()) return false;
    path = *dir + "/" + name;
  }
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace {

// MADV_POPULATE_WRITE over [offset, offset + bytes) of this process's mapping of the pool
// (all of it by default): 0, or the errno.
int PopulateWrite(SharedPool& pool, uint64_t offset = 0, uint64_t bytes = UINT64_MAX) {
  if (bytes == UINT64_MAX) bytes = pool.mapped_size();
  char* at = static_cast<char*>(pool.base()) + offset;
  return madvise(at, bytes, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
}

Status PopulateError(const std::string& what, int err) {
  if (err == EINVAL)
    return Unavailable(what + ": this kernel has no MADV_POPULATE_WRITE (Linux >= 5.14)");
  return ErrnoStatus(what, err);
}

std::string PoolWhat(const std::string& doing, SharedPool& pool) {
  return doing + pool.Name() + " (" + std::to_string(pool.mapped_size() >> 20) + " MiB)";
}

}  // namespace

Status PopulatePoolMapping(SharedPool& pool) {
  const int err = PopulateWrite(pool);
  if (err == 0) return {};
  return PopulateError(PoolWhat("populating this process's mapping of pool ", pool), err);
}

Status PopulatePoolRange(SharedPool& pool, uint64_t offset, uint64_t bytes) {
  const uint64_t size = pool.mapped_size();
  if (offset > size || bytes > size - offset) {
    return InvalidArgument("populating [" + std::to_string(offset) + ", " +
                           std::to_string(offset + bytes) + ") of pool " + pool.Name() +
                           ": past its end (" + std::to_string(size) + " bytes)");
  }
  if (bytes == 0) return {};
  constexpr uint64_t kPage = 4096;  // the mapping's base and size are whole pages
  const uint64_t begin = offset / kPage * kPage;
  const uint64_t end = std::min((offset + bytes + kPage - 1) / kPage * kPage, size);
  const int err = PopulateWrite(pool, begin, end - begin);
  if (err == 0) return {};
  return PopulateError("populating [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") of this process's mapping of pool " + pool.Name(),
                       err);
}

Status PrefaultPool(SharedPool& pool) {
  if (pool.backend() != PoolBackend::kBoost) return {};
  // One call for the whole mapping: the kernel allocates the tmpfs pages (zeroed, once) and
  // installs writable page-table entries, without writing to what is there.
  const int err = PopulateWrite(pool);
  if (err == 0) return {};
  const std::string what = PoolWhat("pre-faulting pool ", pool);
  if (err == ENOMEM || err == EFAULT || err == ENOSPC) {
    return ResourceExhausted(what + ": /dev/shm has no room for the whole pool (" +
                             std::strerror(err) + "); make it larger or lower pool_bytes");
  }
  return PopulateError(what, err);
}

}  // namespace shoal
