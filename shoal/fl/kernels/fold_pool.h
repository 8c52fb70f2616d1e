// FoldPool: splits one large fold (or finiteness scan, or conversion) across a fixed set of worker
// threads, so a leaf aggregator folds a 100 MB update at the machine's memory bandwidth rather
// than one core's. Threads are created once; a call allocates nothing and creates no thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>

#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/worker_team.h"

namespace shoal::aggregator {

// Work is cut into chunks of chunk_elements() (a multiple of 16 elements, so two threads never
// write the same 64-byte line of acc; for a quantized type rounded up to whole blocks) that threads
// take in order from a shared counter: each thread streams through contiguous memory, and a thread
// that is descheduled (a busy node) only delays the chunk it holds. The calling thread works too,
// so a pool of T threads starts T - 1 workers. Calls with n < min_parallel_elements() run on the
// caller's thread alone.
//
// Thread safety: any thread may call, but calls are serialised: one call runs at a time and
// others wait for it (an aggregator normally has one caller, its event loop's worker). The
// setters must not race with calls. Results are bit-identical to the single-thread functions in
// fold.h (every element goes through the same kernel; chunking does not change the arithmetic).
class FoldPool {
 public:
  static constexpr size_t kDefaultMinParallelElements = size_t{1} << 17;  // 512 KB of f32
  static constexpr size_t kDefaultChunkElements = size_t{1} << 15;        // 128 KB of acc
  // FoldFinite's block, in bytes of the update (its wire type): one 4 KiB page, which the fold
  // reads again from L1 right after the scan. bench-fold --fused, 46.8 MB f32 updates on a
  // 2-vCPU Xeon (48 KiB L1d, 2 MiB L2 per core): 1-4 KiB blocks cost 0.8-1.0x the fold alone,
  // 8-64 KiB 1.1-1.3x, the scan then the fold 1.8-1.9x.
  static constexpr size_t kDefaultFiniteBlockBytes = size_t{4} << 10;

  // threads == 0: std::thread::hardware_concurrency() (at least 1).
  explicit FoldPool(unsigned threads = 0) : team_(threads) {}
  FoldPool(const FoldPool&) = delete;
  FoldPool& operator=(const FoldPool&) = delete;

  unsigned threads() const { return team_.threads(); }
  size_t min_parallel_elements() const { return min_parallel_; }
  void set_min_parallel_elements(size_t n) { min_parallel_ = n; }
  size_t chunk_elements() const { return chunk_; }
  void set_chunk_elements(size_t n);  // rounded up to a multiple of 16, at least 16
  size_t finite_block_bytes() const { return finite_block_bytes_; }
  // Rounded up to a multiple of 64, at least 64; for the quantized types it counts values.
  void set_finite_block_bytes(size_t bytes);

  // Same contracts as the functions of the same names in fold.h.
  void Fold(float* acc, const void* x, DType dtype, size_t n, float w);
  // FoldU32 (fold_u32.h): acc[i] += x[i] mod 2^32, split across the threads.
  void FoldU32(uint32_t* acc, const void* x, size_t n);
  void Scale(float* acc, size_t n, float a);
  bool AllFinite(const void* x, DType dtype, size_t n);
  void ConvertToF32(float* out, const void* x, DType dtype, size_t n);
  void ConvertFromF32(void* out, const float* x, DType dtype, size_t n);

  // FoldFinite (fold.h) split across the threads: one pass over x, each block of
  // finite_block_bytes() scanned and then folded while it is in cache. `finite`: no NaN or Inf
  // in x, and all of it folded. Otherwise threads stop taking chunks once one is found, and
  // acc may hold part of x (any finite blocks already folded, on any thread): `folded` says
  // whether anything was. The first block is done on the calling thread before the others
  // start, so a non-finite value there leaves acc untouched (`folded` false) whatever the
  // number of threads. For finite x, bit-identical to Fold.
  struct FoldFiniteResult {
    bool finite = true;
    bool folded = false;
  };
  FoldFiniteResult FoldFinite(float* acc, const void* x, DType dtype, size_t n, float w);

  // acc = ws[0] * xs[0] + ws[1] * xs[1] + ... (f32, n elements each) in one pass over the xs: each
  // chunk of acc is zeroed and then each x folded into it in turn while it is in cache, so acc
  // is written once and not read back from memory between the xs. Bit-identical to zeroing acc
  // and calling Fold with each x in order. xs.size() == ws.size().
  void Sum(float* acc, std::span<const float* const> xs, std::span<const float> ws, size_t n);

 private:
  enum class Op : uint8_t {
    kFold,
    kScale,
    kAllFinite,
    kToF32,
    kFromF32,
    kFoldFinite,
    kSum,
    kFoldU32
  };
  struct Job {
    Op op = Op::kFold;
    DType dtype = DType::kF32;
    float* f32 = nullptr;        // acc (Fold, Scale), out (ToF32), x (FromF32)
    const void* wire = nullptr;  // x (Fold, AllFinite, ToF32)
    void* wire_out = nullptr;    // out (FromF32)
    size_t n = 0;
    float scalar = 0;                       // w or a
    size_t block = 0;                       // FoldFinite's block, in elements
    std::span<const float* const> xs = {};  // Sum's terms and their weights
    std::span<const float> ws = {};
    uint32_t* u32 = nullptr;  // FoldU32's acc
  };

  // Splits across threads, or runs inline when small. Returns false only for an AllFinite or
  // FoldFinite job that found a NaN or Inf.
  bool Run(const Job& job);
  void RunRange(const Job& job, size_t begin, size_t end);
  void TakeChunks(const Job& job);

  size_t min_parallel_ = kDefaultMinParallelElements;
  size_t chunk_ = kDefaultChunkElements;
  size_t finite_block_bytes_ = kDefaultFiniteBlockBytes;

  std::mutex call_mu_;  // serialises callers
  std::atomic<size_t> next_chunk_{0};
  std::atomic<bool> all_finite_{true};
  WorkerTeam team_;
};

}  // namespace shoal::aggregator
