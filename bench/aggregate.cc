// bench-aggregate: the leaf fold (acc += w * update) on ResNet-18-sized buffers (11.69 M
// parameters) for f32 and bf16, one thread and all threads, against the machine's memory
// bandwidth measured the way STREAM does (bench/stream_bandwidth.h: Copy, Scale, Add, Triad with
// regular and non-temporal stores, built with the fold's flags and dispatch, on threads started
// once, arrays 4x the last-level cache, best of --reps), in the same run, interleaved: each round
// runs one fold pass per dtype, then every STREAM kernel once. So that neither side runs from
// cache, a fold pass folds P distinct (acc, update) pairs that together take twice the memory of
// one STREAM array. GB/s count the bytes that move: the fold reads acc and the
// update and writes acc (12 B/element for f32, 10 for bf16; the store hits a line just read, so
// no write-allocate); STREAM's rows count write-allocate only where a probe saw regular stores pay
// for it. Ratio = fold GB/s / the best STREAM row on the same threads: how close the fold runs to
// the memory system's limit, from the best runs; min/median/max are over rounds (each round's
// fold against that round's best STREAM kernel). Higher is better. A row folding one pair over and
// over (the cache may hold it) is shown for comparison, outside the ratio.
//
//   bench-aggregate [--params N (11689512)] [--reps R (5)] [--stream-mb MB (STREAM's rule)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "stream_bandwidth.h"

using namespace shoal::aggregator;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  size_t n = 11'689'512;  // ResNet-18's parameter count
  int reps = 5;
  size_t stream_mb = 0;
  shoal::bench::Args args("bench-aggregate [--params N] [--reps R] [--stream-mb MB]");
  args.Option("--params", &n).Option("--reps", &reps).Option("--stream-mb", &stream_mb);
  if (!args.Parse(argc, argv)) return 2;
  if (n < 16 || reps < 1) {
    std::fprintf(stderr, "bench-aggregate: --params must be >= 16 and --reps >= 1\n");
    return 2;
  }
  std::string stream_how;
  size_t stream_n = shoal::bench::StreamElements(n, &stream_how);
  if (stream_mb > 0) {
    stream_n = std::max(n, stream_mb * 1000000 / sizeof(float));
    stream_how = std::to_string(stream_n * sizeof(float) / 1000000) + " MB per array (--stream-mb)";
  }
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  std::vector<unsigned> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  std::fprintf(stderr,
               "bench-aggregate: %zu params, fold isa %s, threads 1,%u, best of %d; "
               "STREAM %s\n",
               n, FoldIsa(), all, reps, stream_how.c_str());

  struct Row {
    std::string what;
    unsigned threads;
    double bytes_per_element, gbps;
    bool in_ratio;
  };
  std::vector<Row> rows;
  // The fold's buffers: P (acc, update) pairs per dtype, twice one STREAM array's bytes.
  struct FoldSet {
    DType dtype;
    size_t pairs;
    std::vector<std::vector<float>> accs;
    std::vector<std::vector<uint8_t>> xs;
    double bytes_per_element() const { return 2.0 * sizeof(float) + DTypeSize(dtype); }
  };
  std::vector<FoldSet> sets;
  {
    std::vector<float> x32(n, 0.25f);
    for (DType d : {DType::kF32, DType::kBF16}) {
      FoldSet f{d, 0, {}, {}};
      const double pair_bytes = (sizeof(float) + DTypeSize(d)) * static_cast<double>(n);
      f.pairs = static_cast<size_t>(std::max(
          1.0, std::ceil(2.0 * sizeof(float) * static_cast<double>(stream_n) / pair_bytes)));
      for (size_t p = 0; p < f.pairs; ++p) {
        f.accs.emplace_back(n, 0.5f);
        f.xs.emplace_back(n * DTypeSize(d));
        ConvertFromF32(f.xs.back().data(), x32.data(), d, n);
      }
      sets.push_back(std::move(f));
    }
  }
  auto seconds = [](auto&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<double> best_stream(all + 1, 0);
  std::vector<double> round_ratios;  // all threads: fold f32 / best STREAM kernel, per round
  std::string stream_isa, best_name_all;
  std::vector<shoal::bench::StreamResult> probes;
  for (unsigned t : thread_counts) {
    FoldPool pool(t);
    shoal::bench::StreamBench stream(stream_n, t);
    if (!stream.ok()) {
      std::fprintf(stderr, "bench-aggregate: cannot allocate STREAM's arrays\n");
      return 1;
    }
    stream_isa = stream.isa();
    shoal::bench::StreamResult probe;
    stream.Probe(reps, &probe);
    probe.best.threads = t;
    probes.push_back(probe);
    const auto& variants = stream.variants();
    std::vector<double> fold_best(sets.size(), 1e30), stream_best(variants.size(), 1e30);
    for (int r = 0; r <= reps; ++r) {  // round 0 is a warm-up
      std::vector<double> fold_s(sets.size()), stream_s(variants.size());
      for (size_t i = 0; i < sets.size(); ++i) {
        FoldSet& f = sets[i];
        fold_s[i] = seconds([&] {
          for (size_t p = 0; p < f.pairs; ++p) {
            pool.Fold(f.accs[p].data(), f.xs[p].data(), f.dtype, n, 0.1f);
          }
        });
      }
      for (size_t v = 0; v < variants.size(); ++v) stream_s[v] = stream.Once(variants[v]);
      if (r == 0) continue;
      double round_stream = 0;
      for (size_t v = 0; v < variants.size(); ++v) {
        stream_best[v] = std::min(stream_best[v], stream_s[v]);
        round_stream = std::max(round_stream, stream.Row(variants[v], stream_s[v]).gbps);
      }
      for (size_t i = 0; i < sets.size(); ++i) fold_best[i] = std::min(fold_best[i], fold_s[i]);
      if (t == all) {
        const FoldSet& f = sets[0];
        round_ratios.push_back(f.bytes_per_element() * n * f.pairs / fold_s[0] / 1e9 /
                               round_stream);
      }
    }
    for (size_t i = 0; i < sets.size(); ++i) {
      FoldSet& f = sets[i];
      const std::string name = "fold " + std::string(DTypeName(f.dtype));
      rows.push_back({name, t, f.bytes_per_element(),
                      f.bytes_per_element() * n * f.pairs / fold_best[i] / 1e9, true});
      // The same pair over and over: what the cache adds (outside the ratio).
      double same = 1e30;
      for (int r = 0; r <= reps; ++r) {
        const double s2 =
            seconds([&] { pool.Fold(f.accs[0].data(), f.xs[0].data(), f.dtype, n, 0.1f); });
        if (r > 0) same = std::min(same, s2);
      }
      rows.push_back({name + ", same pair", t, f.bytes_per_element(),
                      f.bytes_per_element() * n / same / 1e9, false});
    }
    shoal::bench::StreamRow best{};
    for (size_t v = 0; v < variants.size(); ++v) {
      const shoal::bench::StreamRow row = stream.Row(variants[v], stream_best[v]);
      rows.push_back({"stream " + row.Name(), t, row.bytes_per_element, row.gbps, true});
      if (row.gbps > best.gbps) best = row;
    }
    best_stream[t] = best.gbps;
    if (t == all) best_name_all = best.Name();
    std::fprintf(stderr, "  %u thread(s) done: fold f32 %.2f GB/s, best STREAM %s %.2f GB/s\n", t,
                 sets[0].bytes_per_element() * n * sets[0].pairs / fold_best[0] / 1e9,
                 best.Name().c_str(), best.gbps);
  }
  const size_t pairs_f32 = sets[0].pairs, pairs_bf16 = sets[1].pairs;

  std::printf(
      "bench-aggregate: fold of %.2f M-parameter buffers (f32: %zu pairs, bf16: %zu pairs per "
      "pass) vs STREAM (isa %s, threads started once, best of %d, %s), same run; GB/s of bytes "
      "moved, higher is better\n",
      n / 1e6, pairs_f32, pairs_bf16, stream_isa.c_str(), reps, stream_how.c_str());
  std::printf("%-24s %8s %8s %10s %18s\n", "loop", "threads", "B/elem", "GB/s",
              "ratio/best-stream");
  for (unsigned t : thread_counts) {
    for (const Row& r : rows) {
      if (r.threads != t) continue;
      const bool best = r.what.rfind("stream ", 0) == 0 && r.gbps == best_stream[t];
      std::printf("%-24s %8u %8.0f %10.2f %18.3f%s\n", r.what.c_str(), r.threads,
                  r.bytes_per_element, r.gbps, r.gbps / best_stream[t],
                  best ? "  <- bandwidth" : (r.in_ratio ? "" : "  (cache may hold it)"));
    }
  }
  double ratio_all = 0;
  for (const Row& r : rows) {
    if (r.what == "fold f32" && r.threads == all) ratio_all = r.gbps / best_stream[all];
  }
  for (const auto& p : probes) {
    std::printf(
        "write-allocate probe, %u thread(s): filling an array with regular stores %.3f ms, "
        "non-temporal %.3f ms: %s\n",
        p.best.threads, p.fill_regular_ms, p.fill_nt_ms,
        p.write_allocate ? "regular stores read the line first; their rows count that read"
                         : "no read before regular stores; their rows count STREAM's bytes");
  }
  std::sort(round_ratios.begin(), round_ratios.end());
  std::printf(
      "ratio = fold f32 on %u threads / best STREAM row (%s) on %u threads = %.3f; per "
      "round min/median/max %.3f/%.3f/%.3f; target: fold >= 0.9x\n",
      all, best_name_all.c_str(), all, ratio_all, round_ratios.front(),
      round_ratios[round_ratios.size() / 2], round_ratios.back());
  std::printf("RESULT aggregate ratio=%.3f\n", ratio_all);
  return 0;
}
