// bench-fold: folds K model updates of N params (float32, bfloat16, float16 on the wire) into a
// float32 accumulator, as a leaf aggregator does, on 1 thread and on all threads (FoldPool).
// Figures are update bytes read per second and ms per update (best of --reps passes over the K
// updates). Anchors measured in the same run, on the same thread counts:
//   - numpy 2 (bench/fold_anchor.py, the project venv's) in place: np.multiply(x, w, out=tmp);
//     acc += tmp, with a full-size tmp and cache-blocked, each slice of acc on its own thread;
//   - OpenBLAS cblas_saxpy (acc = w * x + acc) on the same buffers, f32 only, on each OpenBLAS at
//     hand: the one numpy bundles (scipy-openblas 0.3.31 here, its file as the numpy anchor
//     reports it; scipy_-prefixed symbols, 64-bit ints) and Debian's (libopenblas0-pthread,
//     0.3.21: older, but its saxpy on 2 threads ran faster on a loaded 2-vCPU EPYC, 2.5-3.1
//     against 1.8-2.0 GB/s), or those --openblas lists; each loaded at run time after
//     OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed (its own CPU detection, see
//     bench/openblas_env.h), openblas_set_num_threads = Shoal's thread count, the table naming
//     its version and kernels;
//   - memcpy of the same bytes (a ceiling, not an anchor).
// Ratio = Shoal f32 all-threads GB/s / the stronger anchor's f32 all-threads GB/s (higher is
// better); min/median/max pair each pass of Shoal with the same-numbered pass of the anchors.
//
//   bench-fold [--params N (25000000)] [--updates K (16)] [--reps R (3)] [--anchor fold_anchor.py]
//              [--openblas LIB,LIB (numpy's and Debian's)] [--fused]
// --fused measures only the FL leaf's CPU path on float32, all threads: the NaN/Inf scan then
// the fold (two passes over each update, the leaf until issue 11) and FoldFinite's one pass at
// block sizes of 1 to 64 KiB, each against the plain fold of the same updates in the same run
// (the anchor: no check at all); ratio = time / the fold's time (1.0 is a free check).
// --formats int8,int4 (or any of f32, bf16, f16, int8, int4): the fused dequantize-and-fold
// against the memory-bandwidth bound (bench/fold_formats.cc).
#include "shoal/fl/kernels/fold.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "fold_formats.h"
#include "openblas_env.h"
#include "project_python.h"
#include "run_stats.h"
#include "shoal/fl/kernels/fold_pool.h"

using shoal::bench::Median;

namespace {

using shoal::aggregator::DType;
using shoal::aggregator::FoldPool;
using Clock = std::chrono::steady_clock;

constexpr char kDebianOpenBlas[] = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Row {
  std::string what, dtype;
  unsigned threads;
  double gbps, ms_per_update;
};

// One anchor measurement: best GB/s and each pass's GB/s, in pass order.
struct AnchorFigure {
  std::string name;  // "numpy inplace", "numpy blocked", "openblas saxpy"
  std::string dtype;
  unsigned threads = 1;
  double gbps = 0, ms_per_update = 0;
  std::vector<double> rep_gbps;
};

// The numpy anchor's figures; *peer: numpy's version and BLAS; *openblas: the OpenBLAS file it
// loaded ("" when it named none).
std::vector<AnchorFigure> RunNumpy(const std::string& script, size_t n, size_t k, int reps,
                                   unsigned threads, std::string* peer, std::string* openblas) {
  std::vector<AnchorFigure> out;
  const std::string cmd = shoal::bench::OpenBlasAnchorEnv(static_cast<int>(threads)) +
                          shoal::bench::ProjectPython() + " " + script + " --params " +
                          std::to_string(n) + " --updates " + std::to_string(k) + " --reps " +
                          std::to_string(reps) + " --threads " + std::to_string(threads);
  std::fprintf(stderr, "bench-fold: anchor: %s\n", cmd.c_str());
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    char dtype[16] = {}, form[32] = {}, reps_text[2048] = {};
    AnchorFigure a;
    if (std::sscanf(line, "ANCHOR numpy peer=%2047[^\n]", reps_text) == 1) *peer = reps_text;
    if (std::sscanf(line, "ANCHOR numpy openblas=%2047[^\n]", reps_text) == 1) {
      *openblas = reps_text;
    }
    if (std::sscanf(line,
                    "ANCHOR numpy %15s form=%31s threads=%u gbps=%lf ms_per_update=%lf "
                    "rep_s=%2047s",
                    dtype, form, &a.threads, &a.gbps, &a.ms_per_update, reps_text) != 6) {
      continue;
    }
    a.name = std::string("numpy ") + form;
    a.dtype = dtype;
    std::stringstream ss(reps_text);
    std::string s;
    const double bytes = static_cast<double>(n) * k * (a.dtype == "f32" ? 4 : 2);
    while (std::getline(ss, s, ',')) a.rep_gbps.push_back(bytes / std::atof(s.c_str()) / 1e9);
    out.push_back(std::move(a));
  }
  if (pclose(p) != 0) out.clear();
  return out;
}

// OpenBLAS loaded with dlopen, so the bench builds without it and says so when it is absent.
// Two symbol sets: a plain build's (cblas_saxpy, 32-bit ints) and scipy-openblas's, the one
// numpy's wheel bundles (scipy_cblas_saxpy64_, 64-bit ints; scipy_openblas_*64_).
class OpenBlas {
 public:
  static std::unique_ptr<OpenBlas> Load(const std::string& path, std::string* why) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      *why = dlerror();
      return nullptr;
    }
    auto b = std::unique_ptr<OpenBlas>(new OpenBlas(h));
    const char* (*config)() = nullptr;
    const char* (*core)() = nullptr;
    if (dlsym(h, "scipy_cblas_saxpy64_") != nullptr) {
      b->saxpy64_ = reinterpret_cast<Saxpy64Fn>(dlsym(h, "scipy_cblas_saxpy64_"));
      b->set_threads_ =
          reinterpret_cast<void (*)(int)>(dlsym(h, "scipy_openblas_set_num_threads64_"));
      config = reinterpret_cast<const char* (*)()>(dlsym(h, "scipy_openblas_get_config64_"));
      core = reinterpret_cast<const char* (*)()>(dlsym(h, "scipy_openblas_get_corename64_"));
    } else {
      b->saxpy_ = reinterpret_cast<SaxpyFn>(dlsym(h, "cblas_saxpy"));
      b->set_threads_ = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
      config = reinterpret_cast<const char* (*)()>(dlsym(h, "openblas_get_config"));
      core = reinterpret_cast<const char* (*)()>(dlsym(h, "openblas_get_corename"));
    }
    if ((!b->saxpy_ && !b->saxpy64_) || !b->set_threads_ || !config || !core) {
      *why = path + " lacks cblas_saxpy/openblas_set_num_threads: not OpenBLAS";
      return nullptr;
    }
    b->config_ = std::string(config()) + ", " + core() + " kernels";
    // "OpenBLAS 0.3.21 NO_AFFINITY ..." -> "0.3.21"
    const std::string c = config();
    const size_t v = c.find(' ');
    b->version_ = v == std::string::npos ? c : c.substr(v + 1, c.find(' ', v + 1) - v - 1);
    b->path_ = path;
    return b;
  }
  ~OpenBlas() { dlclose(handle_); }
  const std::string& config() const { return config_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  void SetThreads(unsigned t) { set_threads_(static_cast<int>(t)); }
  // acc = w * x + acc. cblas_saxpy counts in a 32-bit int: longer vectors go in pieces.
  void Saxpy(float* acc, const float* x, size_t n, float w) const {
    if (saxpy64_ != nullptr) {
      saxpy64_(static_cast<int64_t>(n), w, x, 1, acc, 1);
      return;
    }
    constexpr size_t kMax = size_t{1} << 30;
    for (size_t i = 0; i < n; i += kMax) {
      saxpy_(static_cast<int>(std::min(kMax, n - i)), w, x + i, 1, acc + i, 1);
    }
  }

 private:
  using SaxpyFn = void (*)(int, float, const float*, int, float*, int);
  using Saxpy64Fn = void (*)(int64_t, float, const float*, int64_t, float*, int64_t);
  explicit OpenBlas(void* h) : handle_(h) {}
  void* handle_;
  SaxpyFn saxpy_ = nullptr;
  Saxpy64Fn saxpy64_ = nullptr;
  void (*set_threads_)(int) = nullptr;
  std::string config_, version_, path_;
};

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

// --fused: see the head of this file. One pass per variant over the K updates per repetition,
// the variants interleaved within each repetition so that a busy machine hits them alike.
int FusedTable(size_t n, size_t k, int reps, unsigned threads) {
  const size_t bytes = n * 4;
  std::vector<float> scratch(n);
  std::vector<std::unique_ptr<uint8_t[]>> updates;
  for (size_t u = 0; u < k; ++u) {
    updates.emplace_back(new uint8_t[bytes]);
    FillUpdate(updates.back().get(), DType::kF32, n, static_cast<uint32_t>(u), scratch);
  }
  std::vector<float> acc(n, 0.0f);
  const float w = 1.0f / static_cast<float>(k);
  FoldPool pool(threads);
  struct Variant {
    std::string name;
    size_t block;  // bytes; 0: fold alone, 1: scan then fold
    std::vector<double> ms;
  };
  std::vector<Variant> vs = {{"fold alone (anchor)", 0, {}}, {"scan, then fold", 1, {}}};
  for (size_t kib : {1, 2, 4, 8, 16, 32, 64}) {
    vs.push_back({"fused, " + std::to_string(kib) + " KiB blocks", kib << 10, {}});
  }
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    for (Variant& v : vs) {
      if (v.block > 1) pool.set_finite_block_bytes(v.block);
      const auto t0 = Clock::now();
      for (const auto& x : updates) {
        if (v.block == 0) {
          pool.Fold(acc.data(), x.get(), DType::kF32, n, w);
        } else if (v.block == 1) {
          if (pool.AllFinite(x.get(), DType::kF32, n)) {
            pool.Fold(acc.data(), x.get(), DType::kF32, n, w);
          }
        } else if (!pool.FoldFinite(acc.data(), x.get(), DType::kF32, n, w).finite) {
          std::fprintf(stderr, "bench-fold: a finite update was refused\n");
          return 1;
        }
      }
      if (r >= 0) v.ms.push_back(Seconds(t0, Clock::now()) * 1e3 / static_cast<double>(k));
    }
  }
  std::printf(
      "FL leaf CPU path, float32, %zu params (%.1f MB) x %zu updates, %u threads, isa %s; ms "
      "per update over %d repetitions, ratio = ms / the plain fold's ms of the same repetition\n",
      n, bytes / 1e6, k, threads, shoal::aggregator::FoldIsa(), reps);
  std::printf("%-28s %8s %8s %8s %8s   %s\n", "variant", "min ms", "med ms", "max ms", "GB/s",
              "ratio min/med/max");
  double best_ratio = 0;
  std::string best_name;
  for (Variant& v : vs) {
    std::vector<double> ratios;
    for (int r = 0; r < reps; ++r) ratios.push_back(v.ms[r] / vs[0].ms[r]);
    std::vector<double> ms = v.ms;
    std::sort(ms.begin(), ms.end());
    std::sort(ratios.begin(), ratios.end());
    const double med_ratio = ratios[ratios.size() / 2];
    std::printf("%-28s %8.2f %8.2f %8.2f %8.2f   %.3f/%.3f/%.3f\n", v.name.c_str(), ms.front(),
                ms[ms.size() / 2], ms.back(), bytes / ms[ms.size() / 2] / 1e6, ratios.front(),
                med_ratio, ratios.back());
    if (v.block > 1 && v.block == FoldPool::kDefaultFiniteBlockBytes) {
      best_ratio = med_ratio;
      best_name = v.name;
    }
  }
  std::printf("the leaf's block: %s\n", best_name.c_str());
  std::printf("RESULT fold_fused ratio=%.3f\n", best_ratio);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 25'000'000, k = 16;
  int reps = 3;
  std::string anchor = SHOAL_FOLD_ANCHOR_PY;
  std::vector<std::string> openblas_paths;  // default: numpy's OpenBLAS and Debian's
  bool fused = false;
  std::vector<std::string> formats;
  shoal::bench::Args args(
      "bench-fold [--params N] [--updates K] [--reps R] [--anchor script] "
      "[--openblas LIB,LIB (numpy's and Debian's)] [--fused] [--formats int8,int4]");
  args.FoldSizes(&n, &k, &reps)
      .Option("--anchor", &anchor)
      .Option("--openblas", &openblas_paths)
      .Option("--formats", &formats)
      .Switch("--fused", &fused, true);
  if (!args.Parse(argc, argv)) return 2;
  reps = std::max(1, reps);
  if (n == 0 || k == 0) {
    std::fprintf(stderr, "bench-fold: --params and --updates must be > 0\n");
    return 2;
  }
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  if (fused) return FusedTable(n, k, reps, all);
  if (!formats.empty()) return shoal::bench::FoldFormatsTable(formats, n, k, reps, all);
  std::fprintf(stderr, "bench-fold: isa=%s params=%zu updates=%zu reps=%d threads=1,%u\n",
               shoal::aggregator::FoldIsa(), n, k, reps, all);

  // numpy first, while this process holds no large buffers.
  std::string numpy_peer, numpy_openblas;
  std::vector<AnchorFigure> anchors =
      RunNumpy(anchor, n, k, reps, all, &numpy_peer, &numpy_openblas);
  if (anchors.empty()) {
    std::fprintf(stderr,
                 "bench-fold: numpy anchor unavailable (numpy missing for %s or %s failed)\n",
                 shoal::bench::ProjectPython().c_str(), anchor.c_str());
  }
  // OpenBLAS's own CPU detection, as on a user's machine (see bench/openblas_env.h).
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  if (openblas_paths.empty()) {
    if (!numpy_openblas.empty()) openblas_paths.push_back(numpy_openblas);
    openblas_paths.push_back(kDebianOpenBlas);
  }
  std::vector<std::unique_ptr<OpenBlas>> blases;
  std::vector<std::string> blas_missing;
  for (const std::string& path : openblas_paths) {
    std::string why;
    if (auto b = OpenBlas::Load(path, &why)) {
      blases.push_back(std::move(b));
    } else {
      std::fprintf(stderr, "bench-fold: OpenBLAS anchor %s unavailable (%s)\n", path.c_str(),
                   why.c_str());
      blas_missing.push_back(path + ": " + why);
    }
  }

  std::vector<Row> rows;
  std::vector<float> scratch(n);
  std::vector<unsigned> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  std::map<unsigned, double> f32_gbps;               // Shoal's best, by thread count
  std::map<unsigned, std::vector<double>> f32_reps;  // Shoal's passes, by thread count
  double memcpy_all_gbps = 0;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t bytes = n * shoal::aggregator::DTypeSize(d);
    const std::string dname(shoal::aggregator::DTypeName(d));
    std::fprintf(stderr, "bench-fold: %s: filling %zu updates of %.1f MB\n", dname.c_str(), k,
                 bytes / 1e6);
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
      std::vector<double> pass_gbps;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        for (const auto& x : updates) pool.Fold(acc.data(), x.get(), d, n, w);
        const double s = Seconds(t0, Clock::now());
        best = std::min(best, s);
        pass_gbps.push_back(static_cast<double>(bytes) * k / s / 1e9);
      }
      const double gbps = static_cast<double>(bytes) * k / best / 1e9;
      rows.push_back({"fold", dname, threads, gbps, best / k * 1e3});
      if (d == DType::kF32) {
        f32_gbps[threads] = gbps;
        f32_reps[threads] = pass_gbps;
      }
      std::fprintf(stderr, "bench-fold: fold %s threads=%u %.2f GB/s\n", dname.c_str(), threads,
                   gbps);

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
      rows.push_back({"allfinite", dname, threads, static_cast<double>(bytes) * k / best / 1e9,
                      best / k * 1e3});
    }
    if (d == DType::kF32) {
      std::fprintf(stderr, "bench-fold: memcpy of the f32 update bytes\n");
      for (unsigned threads : thread_counts) {
        const double gbps =
            MemcpyGbps(updates, reinterpret_cast<uint8_t*>(scratch.data()), bytes, threads, reps);
        rows.push_back({"memcpy", "f32", threads, gbps, bytes / gbps / 1e6});
        if (threads == thread_counts.back()) memcpy_all_gbps = gbps;
      }
      // OpenBLAS last: its threads spin a while after each call, which would slow the folds
      // measured after it; the pause lets them go to sleep before the next library and bf16.
      for (const auto& blas : blases) {
        for (unsigned threads : thread_counts) {
          std::fprintf(stderr, "bench-fold: OpenBLAS %s saxpy threads=%u\n",
                       blas->version().c_str(), threads);
          blas->SetThreads(threads);
          blas->Saxpy(acc.data(), reinterpret_cast<const float*>(updates[0].get()), n, w);
          AnchorFigure a{"saxpy " + blas->version(), "f32", threads, 0, 0, {}};
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            const auto t0 = Clock::now();
            for (const auto& x : updates) {
              blas->Saxpy(acc.data(), reinterpret_cast<const float*>(x.get()), n, w);
            }
            const double s = Seconds(t0, Clock::now());
            best = std::min(best, s);
            a.rep_gbps.push_back(static_cast<double>(bytes) * k / s / 1e9);
          }
          a.gbps = static_cast<double>(bytes) * k / best / 1e9;
          a.ms_per_update = best / k * 1e3;
          anchors.push_back(a);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    }
  }

  std::printf("bench-fold: isa=%s params=%zu updates=%zu (f32 %.0f MB, bf16/f16 %.0f MB each)\n",
              shoal::aggregator::FoldIsa(), n, k, n * 4 / 1e6, n * 2 / 1e6);
  const std::string numpy_text =
      anchors.empty() ? "missing for " + shoal::bench::ProjectPython()
                      : numpy_peer + " (threads: Python threads, one slice of acc each)";
  std::printf("numpy: %s\n", numpy_text.c_str());
  for (const auto& blas : blases) {
    std::printf("saxpy %s: %s: %s\n", blas->version().c_str(), blas->path().c_str(),
                blas->config().c_str());
  }
  for (const std::string& m : blas_missing) std::printf("saxpy missing: %s\n", m.c_str());
  std::printf("%-28s %-6s %8s %10s %14s\n", "op", "dtype", "threads", "GB/s", "ms/update");
  for (const Row& r : rows) {
    std::printf("%-28s %-6s %8u %10.2f %14.3f\n", r.what.c_str(), r.dtype.c_str(), r.threads,
                r.gbps, r.ms_per_update);
  }
  for (const AnchorFigure& a : anchors) {
    std::printf("%-28s %-6s %8u %10.2f %14.3f\n", (a.name + " (anchor)").c_str(), a.dtype.c_str(),
                a.threads, a.gbps, a.ms_per_update);
  }

  // The stronger f32 anchor at each thread count, and pass-by-pass ratios at all threads.
  const unsigned top = thread_counts.back();
  auto strongest = [&](unsigned threads) -> const AnchorFigure* {
    const AnchorFigure* best = nullptr;
    for (const AnchorFigure& a : anchors) {
      if (a.dtype == "f32" && a.threads == threads && (!best || a.gbps > best->gbps)) best = &a;
    }
    return best;
  };
  double ratio;
  if (const AnchorFigure* s = strongest(top)) {
    for (unsigned t : thread_counts) {
      const AnchorFigure* a = strongest(t);
      std::printf("%u thread(s): shoal f32 %.2f GB/s / stronger anchor %s %.2f GB/s = %.2f\n", t,
                  f32_gbps[t], a->name.c_str(), a->gbps, f32_gbps[t] / a->gbps);
    }
    std::vector<double> pass_ratios;
    for (int r = 0; r < reps; ++r) {
      double anchor_r = 0;
      for (const AnchorFigure& a : anchors) {
        if (a.dtype == "f32" && a.threads == top && r < static_cast<int>(a.rep_gbps.size())) {
          anchor_r = std::max(anchor_r, a.rep_gbps[r]);
        }
      }
      if (anchor_r > 0) pass_ratios.push_back(f32_reps[top][r] / anchor_r);
    }
    ratio = f32_gbps[top] / s->gbps;
    std::printf(
        "ratio = shoal f32 fold, %u threads (%.2f GB/s) / stronger anchor, %s on %u threads "
        "(%.2f GB/s) = %.2f (higher is better); per pass min/median/max %.2f/%.2f/%.2f; "
        "vs memcpy %u threads: %.2f\n",
        top, f32_gbps[top], s->name.c_str(), top, s->gbps, ratio,
        *std::min_element(pass_ratios.begin(), pass_ratios.end()), Median(pass_ratios),
        *std::max_element(pass_ratios.begin(), pass_ratios.end()), top,
        f32_gbps[top] / memcpy_all_gbps);
  } else {
    ratio = f32_gbps[top] / memcpy_all_gbps;
    std::printf(
        "numpy and OpenBLAS missing: ratio = shoal f32 fold, %u threads (%.2f GB/s) / memcpy "
        "(%.2f GB/s) = %.2f (higher is better)\n",
        top, f32_gbps[top], memcpy_all_gbps, ratio);
  }
  std::printf("RESULT fold ratio=%.2f\n", ratio);
  return 0;
}
