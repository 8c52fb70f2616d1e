// bench-pool: allocate + release latency of the shared-memory pool, per backend (Boost's
// ShmPool over /dev/shm, DPDK's rings over hugepages), with malloc/free of the same sizes
// measured in the same run as the anchor. Each sample is the mean of a batch of kBatch
// (allocate, 1-byte write, release) rounds, so the clock's own cost stays small; each backend
// is measured over several runs and its ratio to malloc given as min/median/max.
//
//   bench-pool [samples per size, default 100000] [runs, default 3]
//   bench-pool profile <boost|dpdk|malloc> <size> <rounds>   only that round trip, untimed, for
//                                                            perf stat / perf record
// The DPDK rows need 2 MiB hugepages (128 free); without them they say why and are skipped.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shoal/dataplane/pool/hugepages.h"
#include "shoal/dataplane/pool/pool_backend.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatch = 8;
constexpr uint64_t kPoolBytes = uint64_t{256} << 20;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double P99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() * 99 / 100];
}

struct SizeResult {
  double pool_p50, pool_p99, malloc_p50, malloc_p99;
};

// One run over all sizes; false when the pool refused (printed).
bool Run(shoal::SharedPool& p, int iters, const std::vector<size_t>& sizes,
         std::vector<SizeResult>* out, double* all_ratio) {
  std::vector<double> all_pool, all_malloc;
  out->clear();
  for (size_t size : sizes) {
    std::vector<double> pool_ns, malloc_ns;
    pool_ns.reserve(iters);
    malloc_ns.reserve(iters);
    for (int i = 0; i < iters + 1000; ++i) {  // the first 1000 of each warm up
      auto t0 = Clock::now();
      for (int k = 0; k < kBatch; ++k) {
        auto off = p.Allocate(size, shoal::kShoaldSlot);
        if (!off.ok()) {
          std::fprintf(stderr, "bench-pool: %s\n", off.status().ToString().c_str());
          return false;
        }
        *reinterpret_cast<volatile char*>(p.Data(*off).data()) = 1;
        if (!p.Release(*off, shoal::kShoaldSlot).ok()) return false;
      }
      auto t1 = Clock::now();
      for (int k = 0; k < kBatch; ++k) {
        void* m = std::malloc(size);
        *static_cast<volatile char*>(m) = 1;
        std::free(m);
      }
      auto t2 = Clock::now();
      if (i < 1000) continue;
      pool_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
      malloc_ns.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / kBatch);
    }
    all_pool.insert(all_pool.end(), pool_ns.begin(), pool_ns.end());
    all_malloc.insert(all_malloc.end(), malloc_ns.begin(), malloc_ns.end());
    out->push_back({Median(pool_ns), P99(pool_ns), Median(malloc_ns), P99(malloc_ns)});
  }
  *all_ratio = Median(all_pool) / Median(all_malloc);
  return true;
}

}  // namespace

// `rounds` round trips of one backend and size and nothing else, for a profiler.
int Profile(const std::string& which, size_t size, long rounds) {
  if (which == "malloc") {
    for (long i = 0; i < rounds; ++i) {
      void* m = std::malloc(size);
      *static_cast<volatile char*>(m) = 1;
      std::free(m);
    }
    return 0;
  }
  auto backend = shoal::ParsePoolBackend(which);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench-pool: %s\n", backend.status().message().c_str());
    return 2;
  }
  const std::string name = "shoal.bench.profile." + std::to_string(getpid());
  auto pool = shoal::CreatePool(*backend, name, kPoolBytes);
  if (!pool.ok()) {
    std::fprintf(stderr, "bench-pool: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  shoal::SharedPool& p = **pool;
  for (long i = 0; i < rounds; ++i) {
    auto off = p.Allocate(size, shoal::kShoaldSlot);
    if (!off.ok()) return 1;
    *reinterpret_cast<volatile char*>(p.Data(*off).data()) = 1;
    if (!p.Release(*off, shoal::kShoaldSlot).ok()) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "profile") {
    return Profile(argv[2], std::strtoull(argv[3], nullptr, 10), std::atol(argv[4]));
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int runs = std::max(1, argc > 2 ? std::atoi(argv[2]) : 3);
  const std::vector<size_t> sizes = {200, 4000, 60000, 1000000, 4u << 20};
  std::vector<shoal::PoolBackend> backends = {shoal::PoolBackend::kBoost};
  if (auto c = shoal::ChoosePoolBackend("dpdk", kPoolBytes); c.ok()) {
    backends.push_back(shoal::PoolBackend::kDpdk);
  } else {
    std::printf("dpdk: skipped: %s\n", c.status().message().c_str());
  }
  for (shoal::PoolBackend backend : backends) {
    const std::string bname(shoal::PoolBackendName(backend));
    const std::string name = "shoal.bench." + bname + "." + std::to_string(getpid());
    auto pool = shoal::CreatePool(backend, name, kPoolBytes);
    if (!pool.ok()) {
      std::fprintf(stderr, "bench-pool: %s\n", pool.status().ToString().c_str());
      return 1;
    }
    std::vector<double> ratios;
    std::vector<SizeResult> last;
    for (int r = 0; r < runs; ++r) {
      double ratio = 0;
      if (!Run(**pool, iters, sizes, &last, &ratio)) return 1;
      ratios.push_back(ratio);
    }
    std::printf("\npool backend %s (%s), last of %d runs:\n", bname.c_str(),
                (*pool)->Path().c_str(), runs);
    std::printf("%-10s %12s %12s %12s %12s %8s\n", "size", "pool p50 ns", "pool p99 ns",
                "malloc p50", "malloc p99", "ratio");
    for (size_t i = 0; i < sizes.size(); ++i) {
      const SizeResult& s = last[i];
      std::printf("%-10zu %12.0f %12.0f %12.0f %12.0f %8.2f\n", sizes[i], s.pool_p50, s.pool_p99,
                  s.malloc_p50, s.malloc_p99, s.pool_p50 / s.malloc_p50);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("%s / malloc, all sizes (p50 over p50): min %.2f median %.2f max %.2f\n",
                bname.c_str(), ratios.front(), ratios[ratios.size() / 2], ratios.back());
    // "pool" stays the Boost figure it has always been; the DPDK one is pool_dpdk.
    std::printf("RESULT %s ratio=%.2f\n",
                backend == shoal::PoolBackend::kBoost ? "pool" : "pool_dpdk",
                ratios[ratios.size() / 2]);
  }
  return 0;
}
