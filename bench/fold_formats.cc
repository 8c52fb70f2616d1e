// bench-fold --formats int8,int4 (any of f32, bf16, f16, int8, int4): for each format, K updates
// of N params in it folded into one float32 accumulator on all threads (FoldPool, the leaf's
// FoldFinite: each block's scale checked, then folded), best and median ms per update over
// --reps passes. The bound for a fold is the bytes it must move at the machine's bandwidth: the
// update's bytes read plus the accumulator read and written (8 B per param), at the best STREAM
// row measured in the same run on the same threads. Ratio = fold ms / bound ms (1.0: at the
// bandwidth bound). Beside each quantized format, "dequantize, then fold" (the two-step path:
// an f32 scratch written and read back) shows what fusing saves.
#include "fold_formats.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/wire/dtype.h"
#include "stream_bandwidth.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;
using aggregator::FoldPool;

double Ms(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

struct Row {
  std::string name;
  DType dtype;
  bool two_step;
  uint64_t update_bytes;
  std::vector<double> ms;  // per update, one per repetition
};

}  // namespace

int FoldFormatsTable(const std::vector<std::string>& formats, size_t n, size_t k, int reps,
                     unsigned threads) {
  std::vector<Row> rows;
  for (const std::string& f : formats) {
    const std::optional<DType> d = model::UpdateDTypeFromName(f);
    if (!d) {
      std::fprintf(stderr, "bench-fold: --formats: unknown format '%s' (%s)\n", f.c_str(),
                   std::string(model::kUpdateDTypeNames).c_str());
      return 2;
    }
    rows.push_back({f + ", fused fold", *d, false, TensorBytes(*d, n), {}});
    if (IsQuantizedDType(*d)) {
      rows.push_back({f + ", dequantize then fold", *d, true, TensorBytes(*d, n), {}});
    }
  }
  // The machine's bandwidth first, while this process holds no large buffers.
  std::string how;
  const StreamResult stream = MeasureStream(StreamElements(0, &how), threads, reps);
  if (stream.rows.empty()) {
    std::fprintf(stderr, "bench-fold: STREAM could not allocate its arrays\n");
    return 1;
  }
  std::vector<float> acc(n, 0.0f), scratch(n);
  for (size_t i = 0; i < n; ++i)
    scratch[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
  FoldPool pool(threads);
  const float w = 1.0f / static_cast<float>(k);
  for (Row& r : rows) {
    std::vector<std::unique_ptr<std::byte[]>> updates;
    for (size_t u = 0; u < k; ++u) {
      updates.emplace_back(new std::byte[r.update_bytes]);
      scratch[u % n] += 0.5f;  // a different update each time
      pool.ConvertFromF32(updates.back().get(), scratch.data(), r.dtype, n);
    }
    for (int rep = -1; rep < reps; ++rep) {  // -1: warm-up
      const auto t0 = Clock::now();
      for (const auto& x : updates) {
        if (r.two_step) {
          pool.ConvertToF32(scratch.data(), x.get(), r.dtype, n);
          pool.Fold(acc.data(), scratch.data(), DType::kF32, n, w);
        } else if (!pool.FoldFinite(acc.data(), x.get(), r.dtype, n, w).finite) {
          std::fprintf(stderr, "bench-fold: a valid %s update was refused\n", r.name.c_str());
          return 1;
        }
      }
      if (rep >= 0) r.ms.push_back(Ms(t0) / static_cast<double>(k));
    }
  }
  const double gbps = stream.best.gbps;
  std::printf(
      "Fused dequantize-and-fold, %zu params x %zu updates, %u threads, isa %s; bound = (update "
      "bytes + 8 B/param of accumulator read and written) / STREAM %s %.2f GB/s (same run, %s); "
      "ratio = ms / bound ms\n",
      n, k, threads, aggregator::FoldIsa(), stream.best.Name().c_str(), gbps, how.c_str());
  std::printf("%-30s %10s %8s %8s %8s %9s   %s\n", "format, path", "MB/update", "min ms", "med ms",
              "max ms", "bound ms", "ratio min/med/max");
  double worst_fused = 0;
  for (Row& r : rows) {
    std::sort(r.ms.begin(), r.ms.end());
    const double bytes = static_cast<double>(r.update_bytes) + 8.0 * static_cast<double>(n);
    const double bound = bytes / (gbps * 1e9) * 1e3;
    const double med = r.ms[r.ms.size() / 2];
    std::printf("%-30s %10.2f %8.2f %8.2f %8.2f %9.2f   %.2f/%.2f/%.2f\n", r.name.c_str(),
                r.update_bytes / 1e6, r.ms.front(), med, r.ms.back(), bound, r.ms.front() / bound,
                med / bound, r.ms.back() / bound);
    if (!r.two_step && IsQuantizedDType(r.dtype)) worst_fused = std::max(worst_fused, med / bound);
  }
  std::printf("RESULT fold_formats ratio=%.3f\n", worst_fused);
  return 0;
}

}  // namespace shoal::bench
