// Fuzz target for the shared-memory pool's offset checks, on both backends (ShmPool over
// /dev/shm, DpdkPool over hugepages: shoal/dataplane/pool/pool_backend.h): every input runs
// once per backend and both must answer it the same way.
// Offsets and holder slots arrive in descriptors from other processes, so Data, Retain,
// Transfer and Release must refuse every offset that is not a live buffer and every slot out of
// range, without touching memory outside the mapping. The input is a program of operations on
// a fresh small pool: allocate, then data/retain/transfer/release with an offset that is either
// a live buffer's, one near it, or raw. At the end every buffer is released and the pool must
// be empty again (no leaked or double-freed block). The DPDK run needs 2 free 2 MiB hugepages;
// without them (or without DPDK in the build) only Boost runs, and the target says so once.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "shoal/dataplane/pool/dpdk_pool.h"
#include "shoal/dataplane/pool/pool_backend.h"
#include "shoal/dataplane/pool/shm_pool.h"

namespace {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  uint64_t Take(size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n && p_ != end_; ++i) v |= uint64_t{*p_++} << (8 * i);
    return v;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

void RunProgram(shoal::SharedPool& pool, uint64_t segment_bytes, const uint8_t* data, size_t size) {
  using namespace shoal;
  const PoolStats empty = pool.Stats();
  const size_t mapped = pool.mapped_size();

  std::map<uint64_t, uint64_t> live;  // offset -> holder bits, as we believe them
  Reader in(data, size);
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    const uint8_t op = static_cast<uint8_t>(in.Take(1));
    // The offset: a live one, a live one nudged, or 8 raw bytes.
    uint64_t offset = 0;
    const uint8_t how = static_cast<uint8_t>(in.Take(1));
    if (!live.empty() && how % 4 != 3) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(how / 4 % live.size()));
      offset = it->first;
      if (how % 4 == 1) offset += static_cast<int8_t>(in.Take(1));
      if (how % 4 == 2) offset -= 64 * (1 + in.Take(1) % 4);
    } else {
      offset = in.Take(8);
    }
    const HolderSlot slot = static_cast<HolderSlot>(in.Take(1) % 70);  // some out of range
    const HolderSlot other = static_cast<HolderSlot>(in.Take(1) % 70);
    const bool known = live.count(offset) != 0;
    const uint64_t bit = slot < kMaxHolderSlots ? uint64_t{1} << slot : 0;
    const uint64_t other_bit = other < kMaxHolderSlots ? uint64_t{1} << other : 0;

    switch (op % 5) {
      case 0: {
        const size_t want = static_cast<size_t>(in.Take(3)) % (2 * segment_bytes);
        auto a = pool.Allocate(want, slot < kMaxHolderSlots ? slot : 0);
        if (a.ok()) {
          const std::span<std::byte> d = pool.Data(*a);
          if (live.count(*a) != 0 || d.size() < want) std::abort();
          if (!d.empty()) {
            std::memset(d.data(), 0xa5, d.size());
          }
          live[*a] = uint64_t{1} << (slot < kMaxHolderSlots ? slot : 0);
        } else if (a.status().code() != StatusCode::kResourceExhausted &&
                   a.status().code() != StatusCode::kTooLarge) {
          std::abort();
        }
        break;
      }
      case 1: {
        const std::span<std::byte> d = pool.Data(offset);
        if (d.empty() == known) std::abort();
        const auto* base = static_cast<const std::byte*>(pool.base());
        if (!d.empty() && (d.data() < base || d.data() + d.size() > base + mapped)) std::abort();
        for (std::byte& b : d) b = std::byte{0x5a};  // ASan checks every byte is ours
        break;
      }
      case 2: {
        const Status st = pool.Retain(offset, slot);
        const bool should = known && bit != 0 && (live[offset] & bit) == 0;
        if (st.ok() != should) std::abort();
        if (st.ok()) live[offset] |= bit;
        break;
      }
      case 3: {
        const Status st = pool.Transfer(offset, slot, other);
        const bool should = known && bit != 0 && other_bit != 0 && (live[offset] & bit) != 0 &&
                            (slot == other || (live[offset] & other_bit) == 0);
        if (st.ok() != should) std::abort();
        if (st.ok()) live[offset] = (live[offset] & ~bit) | other_bit;
        break;
      }
      case 4: {
        const Status st = pool.Release(offset, slot);
        const bool should = known && bit != 0 && (live[offset] & bit) != 0;
        if (st.ok() != should) std::abort();
        if (st.ok() && (live[offset] &= ~bit) == 0) live.erase(offset);
        break;
      }
    }
    if (pool.Stats().live_buffers != live.size()) std::abort();
  }

  for (auto& [offset, holders] : live) {
    if (pool.Holders(offset) != holders) std::abort();
    for (HolderSlot s = 0; s < kMaxHolderSlots; ++s) {
      if ((holders >> s & 1) != 0 && !pool.Release(offset, s).ok()) std::abort();
    }
  }
  const PoolStats end = pool.Stats();
  if (end.live_buffers != 0 || end.used_bytes != empty.used_bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  static const std::string kName = "shoal.fuzz." + std::to_string(getpid());
  auto boost = CreatePool(PoolBackend::kBoost, kName, ShmPool::kMinSegmentBytes);
  if (!boost.ok()) std::abort();
  RunProgram(**boost, ShmPool::kMinSegmentBytes, data, size);
  boost->reset();
#ifdef SHOAL_WITH_DPDK
  static bool dpdk_skipped = false;
  if (!dpdk_skipped) {
    auto dpdk = CreatePool(PoolBackend::kDpdk, kName, DpdkPool::kMinSegmentBytes);
    if (!dpdk.ok()) {
      std::fprintf(stderr, "fuzz_shm_pool: dpdk backend skipped from here on: %s\n",
                   dpdk.status().ToString().c_str());
      dpdk_skipped = true;
      return 0;
    }
    RunProgram(**dpdk, DpdkPool::kMinSegmentBytes, data, size);
  }
#else
  static bool said = false;
  if (!said) std::fprintf(stderr, "fuzz_shm_pool: dpdk backend not built: boost only\n");
  said = true;
#endif
  return 0;
}
