// The aggregation fold on a CUDA device: acc[f32] += w * x for updates x in f32, bf16 or f16,
// with the same arithmetic as the CPU fold (fold.h: one fused multiply-add per update and
// element, updates applied in order). GpuFolder moves updates from (registered, pinned) host
// memory to the device with copies overlapped with the kernel. Plain C++ header: no CUDA
// headers, so code built without nvcc can include it (the functions exist only in CUDA builds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shoal/common/status.h"
#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/kernels/fold_segments.h"

namespace shoal::aggregator {

// Whether a CUDA device is usable; otherwise `reason` gets "no CUDA device: <why>".
bool GpuFoldAvailable(std::string* reason = nullptr);

// Updates folded by one kernel launch at most: the accumulator is read and written once per
// batch instead of once per update.
inline constexpr int kGpuFoldMaxBatch = 32;

// Device pointers. acc[i] = fma(w[k], x_k[i], acc[i]) for k = 0..count-1 in order, i < n, as
// one launch on `stream` (a cudaStream_t; nullptr = the legacy default stream); count <=
// kGpuFoldMaxBatch, all updates of one dtype. Any alignment of acc (4 bytes) and x (element
// size) works: 16-byte vector loads where acc and every x line up, scalar loads for the unaligned
// head and tail, scalar throughout when they cannot line up. Asynchronous: an error here is a
// launch error; errors during execution surface at the next synchronisation.
Status GpuFoldDevice(float* acc, const void* const* xs, const float* ws, int count, DType dtype,
                     size_t n, void* stream);

// One part of an update in host memory: acc[0..n) += w * x[0..n) (fold_segments.h).
using GpuFoldSegment = FoldSegment;

struct GpuFolderOptions {
  int device = 0;
  size_t chunk_bytes = size_t{8} << 20;  // per staging copy; 8 MiB keeps PCIe at full rate
  int slots = 3;                         // staging buffers in flight (>= 2: double buffering)
};

// Owns a device's streams, staging buffers and (optionally) a device-resident accumulator.
// Three streams: host-to-device copies, kernels, device-to-host copies; chunk i + 1 is copied
// while chunk i is folded. Not thread-safe: one caller at a time.
class GpuFolder {
 public:
  static Result<std::unique_ptr<GpuFolder>> Create(const GpuFolderOptions& options = {});
  ~GpuFolder();
  GpuFolder(const GpuFolder&) = delete;
  GpuFolder& operator=(const GpuFolder&) = delete;

  // Pins [base, base + bytes) for the device (cudaHostRegister, portable): the job's pool,
  // once. Costs about 0.9 s per GiB on an H100 host, so never per update. Unregistered when the
  // folder is destroyed. Unpinned memory works too, but its copies do not overlap the kernel.
  Status RegisterHost(void* base, size_t bytes);
  // Waits for pending work, then unpins what RegisterHost pinned (no-op when nothing is).
  Status UnregisterHost();
  bool registered() const { return registered_base_ != nullptr; }

  // The leaf's path: acc and x both in host memory (the pool's partial sum and the update).
  // Each chunk of acc and x goes to the device, is folded, and acc's chunk comes back; returns
  // once every acc byte is back in host memory. Results equal Fold() in fold.h on the FMA paths.
  // Precondition, checked (InvalidArgument, nothing folded): the segments are disjoint as
  // CheckFoldSegments says. Chunks are pipelined, so chunk j's accumulator bytes may be copied
  // in before chunk i < j's are copied back: an accumulator range folded twice would lose one
  // fold, and an update read from inside an accumulator would read it half-updated.
  Status FoldHost(std::span<const GpuFoldSegment> segments);

  // A device-resident accumulator of n floats (zeroed): for folding many updates and copying
  // the sum back once.
  Status ResetAccumulator(size_t n);
  size_t accumulator_size() const { return acc_n_; }
  float* device_accumulator() { return acc_; }
  // Enqueues acc += w * x for a whole update (accumulator_size() elements) in host memory.
  // `x` must stay valid and unchanged until Synchronize() or DownloadAccumulator() returns.
  Status AccumulateHost(const void* x, DType dtype, float w);
  // Enqueues acc += ws[k] * xs[k] for `count` updates already in device memory (any count:
  // batched kGpuFoldMaxBatch per launch).
  Status AccumulateDevice(const void* const* xs, const float* ws, int count, DType dtype);
  // Waits for everything enqueued; reports any error a kernel or copy hit.
  Status Synchronize();
  // Synchronize, then one copy of the accumulator to `out` (accumulator_size() floats).
  Status DownloadAccumulator(float* out);

  int device() const { return device_; }
  void* compute_stream() const { return compute_; }

 private:
  GpuFolder() = default;
  struct Slot;
  Status Init(const GpuFolderOptions& options);
  Status FoldHostChunk(float* acc, const std::byte* x, DType dtype, size_t n, float w);

  int device_ = 0;
  size_t chunk_elems_ = 0;
  void* copy_in_ = nullptr;  // cudaStream_t
  void* compute_ = nullptr;
  void* copy_out_ = nullptr;
  std::unique_ptr<Slot[]> slots_;
  int num_slots_ = 0;
  uint64_t next_slot_ = 0;
  float* acc_ = nullptr;
  size_t acc_n_ = 0;
  void* registered_base_ = nullptr;
};

}  // namespace shoal::aggregator
