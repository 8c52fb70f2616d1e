// bench-pool: allocate + release latency of the shared-memory pool (ShmPool), with malloc/free
// of the same sizes measured in the same run as the anchor. Each sample is the mean of a batch
// of kBatch (allocate, 1-byte write, release) rounds, so the clock's own cost stays small.
//
//   bench-pool [samples per size, default 100000]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shoal/pool/shm_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatch = 8;

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles Summarise(std::vector<double>& ns) {
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns[ns.size() * 99 / 100]};
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 100000;
  const std::string name = "shoal.bench." + std::to_string(getpid());
  auto pool = shoal::ShmPool::Create(name, uint64_t{256} << 20);
  if (!pool.ok()) {
    std::fprintf(stderr, "bench-pool: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  shoal::ShmPool& p = **pool;
  const std::vector<size_t> sizes = {200, 4000, 60000, 1000000, 4u << 20};

  std::vector<double> all_pool, all_malloc;
  std::printf("%-10s %12s %12s %12s %12s %8s\n", "size", "pool p50 ns", "pool p99 ns", "malloc p50",
              "malloc p99", "ratio");
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
          return 1;
        }
        *reinterpret_cast<volatile char*>(p.Data(*off).data()) = 1;
        if (!p.Release(*off, shoal::kShoaldSlot).ok()) return 1;
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
    Percentiles a = Summarise(pool_ns), b = Summarise(malloc_ns);
    std::printf("%-10zu %12.0f %12.0f %12.0f %12.0f %8.2f\n", size, a.p50, a.p99, b.p50, b.p99,
                a.p50 / b.p50);
  }
  Percentiles a = Summarise(all_pool), b = Summarise(all_malloc);
  std::printf("%-10s %12.0f %12.0f %12.0f %12.0f %8.2f\n", "all", a.p50, a.p99, b.p50, b.p99,
              a.p50 / b.p50);
  std::printf("RESULT pool ratio=%.2f\n", a.p50 / b.p50);
  return 0;
}
