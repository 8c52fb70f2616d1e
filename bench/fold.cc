// bench-fold: folds K model updates of N params (float32, bfloat16, float16 on the wire) into a
// float32 accumulator, as a leaf aggregator does, on 1 thread and on all threads (FoldPool).
// Figures are update bytes read per second and ms per update (best of --reps passes over the K
// updates). Anchors measured in the same run: numpy's `acc += w * x.astype(np.float32)` on the
// same sizes (bench/fold_anchor.py, /usr/bin/python3) and memcpy of the same bytes (a ceiling).
// Ratio = Shoal f32 all-threads GB/s / numpy f32 GB/s: higher is better.
//
//   bench-fold [--params N (25000000)] [--updates K (16)] [--reps R (3)] [--anchor fold_anchor.py]
#include "shoal/aggregator/fold.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shoal/aggregator/fold_pool.h"

namespace {

using shoal::aggregator::DType;
using shoal::aggregator::FoldPool;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Row {
  std::string what, dtype;
  unsigned threads;
  double gbps, ms_per_update;
};

struct Anchor {
  bool have_numpy = false;
  double f32_gbps = 0, f16_gbps = 0, f32_ms = 0, f16_ms = 0;
};

Anchor RunNumpy(const std::string& script, size_t n, size_t k, int reps) {
  Anchor a;
  const std::string cmd = "/usr/bin/python3 " + script + " --params " + std::to_string(n) +
                          " --updates " + std::to_string(k) + " --reps " + std::to_string(reps);
  std::fprintf(stderr, "bench-fold: anchor: %s\n", cmd.c_str());
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return a;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    double gbps, ms;
    if (std::sscanf(line, "ANCHOR numpy f32 gbps=%lf ms_per_update=%lf", &gbps, &ms) == 2) {
      a.have_numpy = true;
      a.f32_gbps = gbps;
      a.f32_ms = ms;
    } else if (std::sscanf(line, "ANCHOR numpy f16 gbps=%lf ms_per_update=%lf", &gbps, &ms) == 2) {
      a.f16_gbps = gbps;
      a.f16_ms = ms;
    }
  }
  if (pclose(p) != 0) a.have_numpy = false;
  return a;
}

// Finite pseudo-random values, different per update; the content does not change the bandwidth.
void FillUpdate(uint8_t* out, DType d, size_t n, uint32_t seed, std::vector<float>& scratch) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    scratch[i] = static_cast<float>(static_cast<int32_t>(s)) * 0x1p-31f;
  }
  shoal::aggregator::ConvertFromF32(out, scratch.data(), d, n);
}

// memcpy of each update's bytes into one destination, split over `threads` threads.
double MemcpyGbps(const std::vector<std::unique_ptr<uint8_t[]>>& src, uint8_t* dst, size_t bytes,
                  unsigned threads, int reps) {
  auto copy_all = [&] {
    for (const auto& s : src) {
      if (threads == 1) {
        std::memcpy(dst, s.get(), bytes);
        continue;
      }
      std::vector<std::thread> ts;
      const size_t slice = (bytes / threads + 63) & ~size_t{63};
      for (unsigned t = 0; t < threads; ++t) {
        const size_t b = std::min(bytes, t * slice), e = std::min(bytes, b + slice);
        ts.emplace_back([&, b, e] { std::memcpy(dst + b, s.get() + b, e - b); });
      }
      for (auto& t : ts) t.join();
    }
  };
  copy_all();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    copy_all();
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  return static_cast<double>(bytes) * src.size() / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 25'000'000, k = 16;
  int reps = 3;
  std::string anchor = SHOAL_FOLD_ANCHOR_PY;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--params" && v) {
      n = std::strtoull(v, nullptr, 10), ++i;
    } else if (a == "--updates" && v) {
      k = std::strtoull(v, nullptr, 10), ++i;
    } else if (a == "--reps" && v) {
      reps = std::max(1, std::atoi(v)), ++i;
    } else if (a == "--anchor" && v) {
      anchor = v, ++i;
    } else {
      std::fprintf(stderr,
                   "usage: bench-fold [--params N] [--updates K] [--reps R] [--anchor script]\n");
      return 2;
    }
  }
  if (n == 0 || k == 0) {
    std::fprintf(stderr, "bench-fold: --params and --updates must be > 0\n");
    return 2;
  }
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  std::fprintf(stderr, "bench-fold: isa=%s params=%zu updates=%zu reps=%d threads=1,%u\n",
               shoal::aggregator::FoldIsa(), n, k, reps, all);

  // numpy first, while this process holds no large buffers.
  const Anchor np = RunNumpy(anchor, n, k, reps);
  if (!np.have_numpy) {
    std::fprintf(stderr,
                 "bench-fold: numpy anchor unavailable (numpy missing for /usr/bin/python3 "
                 "or %s failed): the ratio is against memcpy\n",
                 anchor.c_str());
  }

  std::vector<Row> rows;
  std::vector<float> scratch(n);
  std::vector<unsigned> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  double f32_all_gbps = 0, memcpy_all_gbps = 0;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t bytes = n * shoal::aggregator::DTypeSize(d);
    std::fprintf(stderr, "bench-fold: %s: filling %zu updates of %.1f MB\n",
                 shoal::aggregator::DTypeName(d), k, bytes / 1e6);
    std::vector<std::unique_ptr<uint8_t[]>> updates;
    for (size_t u = 0; u < k; ++u) {
      updates.emplace_back(new uint8_t[bytes]);
      FillUpdate(updates.back().get(), d, n, static_cast<uint32_t>(u), scratch);
    }
    std::vector<float> acc(n, 0.0f);
    const float w = 1.0f / static_cast<float>(k);
    for (unsigned threads : thread_counts) {
      FoldPool pool(threads);
      pool.Fold(acc.data(), updates[0].get(), d, n, w);  // warm-up
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        for (const auto& x : updates) pool.Fold(acc.data(), x.get(), d, n, w);
        best = std::min(best, Seconds(t0, Clock::now()));
      }
      const double gbps = static_cast<double>(bytes) * k / best / 1e9;
      rows.push_back({"fold", shoal::aggregator::DTypeName(d), threads, gbps, best / k * 1e3});
      if (d == DType::kF32 && threads == thread_counts.back()) f32_all_gbps = gbps;
      std::fprintf(stderr, "bench-fold: fold %s threads=%u %.2f GB/s\n",
                   shoal::aggregator::DTypeName(d), threads, gbps);

      // The finiteness scan that runs before each fold, same bytes.
      best = 1e30;
      bool finite = true;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        for (const auto& x : updates) finite = pool.AllFinite(x.get(), d, n) && finite;
        best = std::min(best, Seconds(t0, Clock::now()));
      }
      if (!finite) {
        std::fprintf(stderr, "bench-fold: AllFinite rejected a finite update\n");
        return 1;
      }
      rows.push_back({"allfinite", shoal::aggregator::DTypeName(d), threads,
                      static_cast<double>(bytes) * k / best / 1e9, best / k * 1e3});
    }
    if (d == DType::kF32) {
      std::fprintf(stderr, "bench-fold: memcpy of the f32 update bytes\n");
      for (unsigned threads : thread_counts) {
        const double gbps =
            MemcpyGbps(updates, reinterpret_cast<uint8_t*>(scratch.data()), bytes, threads, reps);
        rows.push_back({"memcpy", "f32", threads, gbps, bytes / gbps / 1e6});
        if (threads == thread_counts.back()) memcpy_all_gbps = gbps;
      }
    }
  }

  std::printf("bench-fold: isa=%s params=%zu updates=%zu (f32 %.0f MB, bf16/f16 %.0f MB each)\n",
              shoal::aggregator::FoldIsa(), n, k, n * 4 / 1e6, n * 2 / 1e6);
  std::printf("%-18s %-6s %8s %10s %14s\n", "op", "dtype", "threads", "GB/s", "ms/update");
  for (const Row& r : rows) {
    std::printf("%-18s %-6s %8u %10.2f %14.3f\n", r.what.c_str(), r.dtype.c_str(), r.threads,
                r.gbps, r.ms_per_update);
  }
  double ratio;
  if (np.have_numpy) {
    std::printf("%-18s %-6s %8u %10.2f %14.3f\n", "numpy (anchor)", "f32", 1u, np.f32_gbps,
                np.f32_ms);
    if (np.f16_gbps > 0) {
      std::printf("%-18s %-6s %8u %10.2f %14.3f\n", "numpy (anchor)", "f16", 1u, np.f16_gbps,
                  np.f16_ms);
    }
    ratio = f32_all_gbps / np.f32_gbps;
    std::printf(
        "ratio = shoal f32 fold, %u threads (%.2f GB/s) / numpy f32 (%.2f GB/s) = %.2f "
        "(higher is better); vs memcpy %u threads: %.2f\n",
        thread_counts.back(), f32_all_gbps, np.f32_gbps, ratio, thread_counts.back(),
        f32_all_gbps / memcpy_all_gbps);
  } else {
    ratio = f32_all_gbps / memcpy_all_gbps;
    std::printf(
        "numpy missing: ratio = shoal f32 fold, %u threads (%.2f GB/s) / memcpy (%.2f "
        "GB/s) = %.2f (higher is better)\n",
        thread_counts.back(), f32_all_gbps, memcpy_all_gbps, ratio);
  }
  std::printf("RESULT fold ratio=%.2f\n", ratio);
  return 0;
}
