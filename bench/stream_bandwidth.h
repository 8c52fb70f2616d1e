// The machine's memory bandwidth measured the way STREAM (McCalpin) does, for the benchmarks
// that compare the fold with it (bench-aggregate, bench-round): the four kernels Copy (a = b),
// Scale (a = s*b), Add (a = b + c) and Triad (a = b + s*c) over float arrays, each thread on its
// own static slice, on a team of threads started once (STREAM's OpenMP team), best of N runs.
//
// Built like the fold: the same CMake flags (-O3 in Release, no -march), each SIMD body in a
// function with its own target attribute (AVX-512F, or AVX2+FMA), picked at run time with
// __builtin_cpu_supports, as shoal/fl/kernels does. Every kernel runs twice, with regular
// stores and with non-temporal (streaming) stores. Bytes are the bytes that move. Non-temporal
// stores write without reading: STREAM's 8 B/element (Copy, Scale) and 12 (Add, Triad). A regular
// store to a line not in cache may read the line first (write-allocate), one more array of
// traffic, or not (CPUs that see the whole line written skip the read); a probe measures which:
// filling an array with regular stores against filling it with non-temporal ones. When regular
// fills take 1.5x as long or more, the regular rows count the read (12 and 16 B/element);
// otherwise they count STREAM's bytes. The bandwidth is the best row, whichever store won.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/enum_names.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SHOAL_STREAM_X86 1
#endif

namespace shoal::bench {

// Threads started once; Run(f) calls f(t, T) on each of T threads (the caller is thread 0) and
// returns when all are done. Workers wait on an atomic (futex), as FoldPool's do on a condvar.
class ThreadTeam {
 public:
  explicit ThreadTeam(unsigned threads) {
    for (unsigned t = 1; t < std::max(1u, threads); ++t)
      workers_.emplace_back([this, t] { Loop(t); });
  }
  ~ThreadTeam() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
  }
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  void Run(const std::function<void(unsigned, unsigned)>& f) {
    job_ = &f;
    pending_.store(static_cast<unsigned>(workers_.size()));
    generation_.fetch_add(1);
    generation_.notify_all();
    f(0, size());
    for (unsigned p = pending_.load(); p != 0; p = pending_.load()) pending_.wait(p);
  }

 private:
  void Loop(unsigned t) {
    uint64_t seen = 0;
    for (;;) {
      generation_.wait(seen);
      seen = generation_.load();
      if (stop_.load()) return;
      (*job_)(t, size());
      if (pending_.fetch_sub(1) == 1) pending_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<unsigned> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(unsigned, unsigned)>* job_ = nullptr;
};

// STREAM's rule for the array size: each array at least 4x the last-level cache, so no kernel runs
// from cache. Here at least `at_least` elements, and at most 1/48 of physical memory per array
// (the machine may be shared; three arrays then hold a sixteenth of it). `how` says which bound
// won.
inline size_t StreamElements(size_t at_least, std::string* how) {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (llc <= 0) llc = 32L << 20;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t ram = pages > 0 && page > 0 ? static_cast<size_t>(pages) * page : size_t{8} << 30;
  const size_t rule = 4 * static_cast<size_t>(llc) / sizeof(float);
  const size_t cap = ram / 48 / sizeof(float);
  size_t n = std::max(at_least, std::min(rule, cap));
  n = (n + 15) & ~size_t{15};
  *how = std::to_string(n * sizeof(float) / 1000000) + " MB per array (STREAM's rule: 4 x " +
         std::to_string(llc >> 20) +
         " MiB last-level cache = " + std::to_string(rule * sizeof(float) / 1000000) + " MB" +
         (rule > cap && cap >= at_least ? "; capped at RAM/48" : "") + ")";
  return n;
}

enum class StreamKernel { kCopy, kScale, kAdd, kTriad };

inline const char* StreamKernelName(StreamKernel k) {
  static constexpr EnumName<StreamKernel> kNames[] = {{StreamKernel::kCopy, "copy"},
                                                      {StreamKernel::kScale, "scale"},
                                                      {StreamKernel::kAdd, "add"},
                                                      {StreamKernel::kTriad, "triad"}};
  return NameOf(kNames, k, "?");
}

// Arrays each kernel reads and writes, per element (STREAM's counting).
inline int StreamArrays(StreamKernel k) {
  return k == StreamKernel::kCopy || k == StreamKernel::kScale ? 2 : 3;
}

namespace stream_internal {

template <StreamKernel K>
inline float Scalar(const float* b, const float* c, float s, size_t i) {
  if constexpr (K == StreamKernel::kCopy) return b[i];
  if constexpr (K == StreamKernel::kScale) return s * b[i];
  if constexpr (K == StreamKernel::kAdd) return b[i] + c[i];
  return __builtin_fmaf(s, c[i], b[i]);
}

// The write-allocate probe's body: a[lo, hi) = s.
template <bool kNonTemporal>
void FillScalar(float* a, size_t lo, size_t hi, float s) {
  for (size_t i = lo; i < hi; ++i) a[i] = s;
}

template <StreamKernel K>
void ScalarRange(float* a, const float* b, const float* c, float s, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; ++i) a[i] = Scalar<K>(b, c, s, i);
}

#ifdef SHOAL_STREAM_X86
// The SIMD bodies (stream_simd.inc), once per ISA: its vector type, its target attribute and its
// intrinsics' prefix.
namespace avx512 {
using V = __m512;
#define SHOAL_STREAM_TARGET __attribute__((target("avx512f")))
#define SHOAL_STREAM_OP(op) _mm512_##op
#include "stream_simd.inc"
}  // namespace avx512

namespace avx2 {
using V = __m256;
#define SHOAL_STREAM_TARGET __attribute__((target("avx2,fma")))
#define SHOAL_STREAM_OP(op) _mm256_##op
#include "stream_simd.inc"
}  // namespace avx2
#endif

using RangeFn = void (*)(float*, const float*, const float*, float, size_t, size_t);

// The widest body this CPU runs, or nullptr (non-temporal stores without SIMD).
template <StreamKernel K>
inline RangeFn Pick(bool non_temporal, std::string* isa) {
#ifdef SHOAL_STREAM_X86
  if (__builtin_cpu_supports("avx512f")) {
    *isa = "avx512";
    return non_temporal ? avx512::Range<K, true> : avx512::Range<K, false>;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *isa = "avx2";
    return non_temporal ? avx2::Range<K, true> : avx2::Range<K, false>;
  }
#endif
  *isa = "scalar";
  return non_temporal ? nullptr : ScalarRange<K>;
}

using FillFn = void (*)(float*, size_t, size_t, float);

inline FillFn PickFill(bool non_temporal) {
#ifdef SHOAL_STREAM_X86
  if (__builtin_cpu_supports("avx512f")) {
    return non_temporal ? avx512::Fill<true> : avx512::Fill<false>;
  }
  if (__builtin_cpu_supports("avx2")) return non_temporal ? avx2::Fill<true> : avx2::Fill<false>;
#endif
  return non_temporal ? nullptr : FillScalar<false>;
}

inline RangeFn Pick(StreamKernel k, bool non_temporal, std::string* isa) {
  switch (k) {
    case StreamKernel::kCopy:
      return Pick<StreamKernel::kCopy>(non_temporal, isa);
    case StreamKernel::kScale:
      return Pick<StreamKernel::kScale>(non_temporal, isa);
    case StreamKernel::kAdd:
      return Pick<StreamKernel::kAdd>(non_temporal, isa);
    case StreamKernel::kTriad:
      return Pick<StreamKernel::kTriad>(non_temporal, isa);
  }
  return nullptr;
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace stream_internal

struct StreamRow {
  StreamKernel kernel;
  bool non_temporal;
  unsigned threads;
  double bytes_per_element;  // what moves: STREAM's arrays, + 1 read where write-allocate is
  double gbps;               // bytes_per_element * n / best seconds / 1e9
  double best_ms;

  std::string Name() const {
    return std::string(StreamKernelName(kernel)) + (non_temporal ? " nt-store" : " store");
  }
};

struct StreamResult {
  std::string isa;
  size_t elements = 0;
  // The write-allocate probe: best ms to fill one array with regular / non-temporal stores.
  double fill_regular_ms = 0, fill_nt_ms = 0;
  bool write_allocate = false;  // regular fills took >= 1.5x the non-temporal ones
  std::vector<StreamRow> rows;
  StreamRow best{};  // the row with the highest GB/s
};

// STREAM's three arrays of n floats and its team of threads. The arrays are first touched by the
// threads that use them, as STREAM does; each thread works on its own static slice, which starts
// on a 16-element (64-byte) boundary: aligned stores, no line shared by two threads.
class StreamBench {
 public:
  struct Variant {
    StreamKernel kernel;
    bool non_temporal;
    stream_internal::RangeFn fn;
  };

  StreamBench(size_t n, unsigned threads) : n_(n), team_(threads) {
    const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
    for (auto* p : {&a_, &b_, &c_}) p->reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!ok()) return;
    team_.Run([&](unsigned t, unsigned T) {
      const auto [lo, hi] = Slice(t, T);
      for (size_t i = lo; i < hi; ++i) a_.get()[i] = 1.0f, b_.get()[i] = 2.0f, c_.get()[i] = 0.5f;
    });
    for (bool nt : {false, true}) {
      for (StreamKernel k :
           {StreamKernel::kCopy, StreamKernel::kScale, StreamKernel::kAdd, StreamKernel::kTriad}) {
        if (auto fn = stream_internal::Pick(k, nt, &isa_)) variants_.push_back({k, nt, fn});
      }
    }
  }

  bool ok() const { return a_ && b_ && c_; }
  size_t elements() const { return n_; }
  unsigned threads() const { return team_.size(); }
  const std::string& isa() const { return isa_; }
  const std::vector<Variant>& variants() const { return variants_; }
  // What the last kernel wrote (a); b holds 2 and c 0.5 throughout.
  const float* output() const { return a_.get(); }

  // Seconds for one run of a kernel over the whole arrays.
  double Once(const Variant& v) {
    return Timed([&](unsigned t, unsigned T) {
      const auto [lo, hi] = Slice(t, T);
      v.fn(a_.get(), b_.get(), c_.get(), 3.0f, lo, hi);
    });
  }

  // The write-allocate probe: best of `reps` fills of one array with regular and with
  // non-temporal stores. Sets write_allocate(): regular fills took >= 1.5x as long.
  void Probe(int reps, StreamResult* out) {
    const stream_internal::FillFn regular = stream_internal::PickFill(false);
    const stream_internal::FillFn nt = stream_internal::PickFill(true);
    auto best_ms = [&](stream_internal::FillFn fill) {
      double best = 1e30;
      for (int r = 0; r <= reps; ++r) {  // the first is a warm-up
        const double s = Timed([&](unsigned t, unsigned T) {
          const auto [lo, hi] = Slice(t, T);
          fill(a_.get(), lo, hi, 1.0f);
        });
        if (r > 0) best = std::min(best, s);
      }
      return best * 1e3;
    };
    out->fill_regular_ms = best_ms(regular);
    if (nt != nullptr) {
      out->fill_nt_ms = best_ms(nt);
      write_allocate_ = out->fill_regular_ms >= 1.5 * out->fill_nt_ms;
    } else {
      write_allocate_ = true;  // no way to tell: assume the common case
    }
    out->write_allocate = write_allocate_;
  }
  bool write_allocate() const { return write_allocate_; }

  // Bytes that move per element: STREAM's arrays, + 1 read where regular stores write-allocate.
  double BytesPerElement(const Variant& v) const {
    return 4.0 * (StreamArrays(v.kernel) + (!v.non_temporal && write_allocate_ ? 1 : 0));
  }

  StreamRow Row(const Variant& v, double best_s) const {
    const double per = BytesPerElement(v);
    return {
        v.kernel,    v.non_temporal, threads(), per, per * static_cast<double>(n_) / best_s / 1e9,
        best_s * 1e3};
  }

 private:
  std::pair<size_t, size_t> Slice(unsigned t, unsigned T) const {
    const size_t lo = std::min(n_, (n_ * t / T) & ~size_t{15});
    const size_t hi = t + 1 == T ? n_ : std::min(n_, (n_ * (t + 1) / T) & ~size_t{15});
    return {lo, hi};
  }
  double Timed(const std::function<void(unsigned, unsigned)>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    team_.Run(f);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  size_t n_;
  ThreadTeam team_;
  std::unique_ptr<float, stream_internal::AlignedFree> a_, b_, c_;
  std::vector<Variant> variants_;
  std::string isa_;
  bool write_allocate_ = false;
};

// The write-allocate probe, then `reps` rounds of every kernel with both kinds of store after one
// warm-up round (kernels interleaved within a round, as STREAM does); best run of each.
inline StreamResult MeasureStream(size_t n, unsigned threads, int reps) {
  StreamResult out;
  out.elements = n;
  StreamBench bench(n, threads);
  if (!bench.ok()) return out;
  out.isa = bench.isa();
  bench.Probe(reps, &out);
  std::vector<double> best(bench.variants().size(), 1e30);
  for (int r = 0; r <= std::max(1, reps); ++r) {
    for (size_t v = 0; v < bench.variants().size(); ++v) {
      const double s = bench.Once(bench.variants()[v]);
      if (r > 0) best[v] = std::min(best[v], s);
    }
  }
  for (size_t v = 0; v < bench.variants().size(); ++v) {
    out.rows.push_back(bench.Row(bench.variants()[v], best[v]));
    if (out.rows.back().gbps > out.best.gbps) out.best = out.rows.back();
  }
  return out;
}

}  // namespace shoal::bench
