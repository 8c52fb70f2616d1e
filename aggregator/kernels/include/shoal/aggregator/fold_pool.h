// FoldPool: splits one large fold (or finiteness scan, or conversion) across a fixed set of worker
// threads, so a leaf aggregator folds a 100 MB update at the machine's memory bandwidth rather
// than one core's. Threads are created once; a call allocates nothing and creates no thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "shoal/aggregator/fold.h"

namespace shoal::aggregator {

// Work is cut into chunks of chunk_elements() (a multiple of 16 elements, so two threads never
// write the same 64-byte line of acc) that threads take in order from a shared counter: each
// thread streams through contiguous memory, and a thread that is descheduled (a busy node) only
// delays the chunk it holds. The calling thread works too, so a pool of T threads starts T - 1
// workers. Calls with n < min_parallel_elements() run on the caller's thread alone.
//
// Thread safety: any thread may call, but calls are serialised: one call runs at a time and
// others wait for it (an aggregator normally has one caller, its event loop's worker). The
// setters must not race with calls. Results are bit-identical to the single-thread functions in
// fold.h (every element goes through the same kernel; chunking does not change the arithmetic).
class FoldPool {
 public:
  static constexpr size_t kDefaultMinParallelElements = size_t{1} << 17;  // 512 KB of f32
  static constexpr size_t kDefaultChunkElements = size_t{1} << 15;        // 128 KB of acc

  // threads == 0: std::thread::hardware_concurrency() (at least 1).
  explicit FoldPool(unsigned threads = 0);
  ~FoldPool();
  FoldPool(const FoldPool&) = delete;
  FoldPool& operator=(const FoldPool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }
  size_t min_parallel_elements() const { return min_parallel_; }
  void set_min_parallel_elements(size_t n) { min_parallel_ = n; }
  size_t chunk_elements() const { return chunk_; }
  void set_chunk_elements(size_t n);  // rounded up to a multiple of 16, at least 16

  // Same contracts as the functions of the same names in fold.h.
  void Fold(float* acc, const void* x, DType dtype, size_t n, float w);
  void Scale(float* acc, size_t n, float a);
  bool AllFinite(const void* x, DType dtype, size_t n);
  void ConvertToF32(float* out, const void* x, DType dtype, size_t n);
  void ConvertFromF32(void* out, const float* x, DType dtype, size_t n);

 private:
  enum class Op : uint8_t { kFold, kScale, kAllFinite, kToF32, kFromF32 };
  struct Job {
    Op op = Op::kFold;
    DType dtype = DType::kF32;
    float* f32 = nullptr;        // acc (Fold, Scale), out (ToF32), x (FromF32)
    const void* wire = nullptr;  // x (Fold, AllFinite, ToF32)
    void* wire_out = nullptr;    // out (FromF32)
    size_t n = 0;
    float scalar = 0;  // w or a
  };

  // Splits across threads, or runs inline when small. Returns false only for an AllFinite job
  // that found a NaN or Inf.
  bool Run(const Job& job);
  void RunRange(const Job& job, size_t begin, size_t end);
  void TakeChunks(const Job& job);
  void WorkerLoop();

  size_t min_parallel_ = kDefaultMinParallelElements;
  size_t chunk_ = kDefaultChunkElements;

  std::mutex call_mu_;  // serialises callers

  std::mutex mu_;
  std::condition_variable wake_;  // workers: a new generation or stop
  std::condition_variable done_;  // caller: every worker finished the generation
  uint64_t generation_ = 0;
  unsigned busy_ = 0;  // workers that have not finished the current generation
  bool stop_ = false;
  Job job_;

  std::atomic<size_t> next_chunk_{0};
  std::atomic<bool> all_finite_{true};

  std::vector<std::thread> workers_;
};

}  // namespace shoal::aggregator
