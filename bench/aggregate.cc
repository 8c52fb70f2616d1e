// bench-aggregate: the leaf fold (acc += w * update) on a ResNet-18-sized update (11.69 M
// parameters) for f32 and bf16, one thread and all threads, against a STREAM-like triad
// (a[i] = b[i] + s * c[i]) over buffers of the same size in the same run. GB/s counts the
// bytes each loop touches (fold: read acc + read update + write acc; triad: read b, c + write
// a), so the ratio says how close the fold runs to the memory system's limit. Higher is better.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shoal/aggregator/fold.h"
#include "shoal/aggregator/fold_pool.h"

using namespace shoal::aggregator;
using Clock = std::chrono::steady_clock;

namespace {

template <typename F>
double BestSeconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// The triad split over `threads` std::threads (created once per call: the same shape as
// STREAM's OpenMP loop; thread start is ~10 µs against a ~10 ms loop).
void Triad(float* a, const float* b, const float* c, size_t n, float s, unsigned threads) {
  auto part = [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
  };
  if (threads <= 1) return part(0, n);
  std::vector<std::thread> ts;
  const size_t chunk = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const size_t lo = t * chunk, hi = std::min(n, lo + chunk);
    ts.emplace_back(part, lo, hi);
  }
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 11'689'512;  // ResNet-18's parameter count
  int reps = 10;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--params") n = std::stoull(argv[++i]);
    if (std::string(argv[i]) == "--reps") reps = std::stoi(argv[++i]);
  }
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> acc(n, 0.5f), a(n), b(n, 1.0f), c(n, 2.0f), x32(n, 0.25f);
  std::vector<uint16_t> x16(n);
  ConvertFromF32(x16.data(), x32.data(), DType::kBF16, n);
  std::fprintf(stderr, "bench-aggregate: %zu params, isa %s, %u threads, best of %d\n", n,
               FoldIsa(), all, reps);

  struct Row {
    std::string what;
    unsigned threads;
    double gbps;
  };
  std::vector<Row> rows;
  for (unsigned t : {1u, all}) {
    FoldPool pool(t);
    const double f32 = BestSeconds(reps, [&] { pool.Fold(acc.data(), x32.data(), DType::kF32, n, 0.1f); });
    rows.push_back({"fold f32", t, 3.0 * 4 * n / f32 / 1e9});
    const double bf16 = BestSeconds(reps, [&] { pool.Fold(acc.data(), x16.data(), DType::kBF16, n, 0.1f); });
    rows.push_back({"fold bf16", t, (2.0 * 4 + 2) * n / bf16 / 1e9});
    const double triad = BestSeconds(reps, [&] { Triad(a.data(), b.data(), c.data(), n, 3.0f, t); });
    rows.push_back({"triad (anchor)", t, 3.0 * 4 * n / triad / 1e9});
    std::fprintf(stderr, "  %u thread(s) done\n", t);
  }
  std::printf("bench-aggregate: fold of a %.2f M-parameter update vs a STREAM-like triad, same "
              "buffers size, same run; GB/s of bytes touched, higher is better\n",
              n / 1e6);
  std::printf("%-16s %8s %10s %14s\n", "loop", "threads", "GB/s", "ratio/triad");
  double ratio_all = 0;
  for (const Row& r : rows) {
    double triad = 0;
    for (const Row& q : rows) {
      if (q.what == "triad (anchor)" && q.threads == r.threads) triad = q.gbps;
    }
    std::printf("%-16s %8u %10.2f %14.3f\n", r.what.c_str(), r.threads, r.gbps, r.gbps / triad);
    if (r.what == "fold f32" && r.threads == all) ratio_all = r.gbps / triad;
  }
  std::printf("target: fold >= 0.9x triad\n");
  std::printf("RESULT aggregate ratio=%.3f\n", ratio_all);
  return 0;
}
