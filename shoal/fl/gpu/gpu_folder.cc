// GpuFolder: staging buffers and three streams (copy in, fold, copy out) that pipeline host
// updates through the device. Chunk i's slot is reused by chunk i + slots only after the event
// that ends chunk i's use of it, so a copy never overwrites data a kernel still reads.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "shoal/common/cuda_status.h"
#include "shoal/fl/gpu/gpu_fold.h"

namespace shoal::aggregator {

struct GpuFolder::Slot {
  float* acc = nullptr;          // device: a chunk of the host accumulator (FoldHost)
  std::byte* x = nullptr;        // device: a chunk of an update
  cudaEvent_t staged = nullptr;  // copies in done
  cudaEvent_t folded = nullptr;  // kernel done
  cudaEvent_t free = nullptr;    // everything that reads the slot done
};

namespace {
cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

Result<std::unique_ptr<GpuFolder>> GpuFolder::Create(const GpuFolderOptions& options) {
  std::string why;
  if (!GpuFoldAvailable(&why)) return Unavailable(why);
  std::unique_ptr<GpuFolder> f(new GpuFolder());
  Status st = f->Init(options);
  if (!st.ok()) return st;
  return f;
}

Status GpuFolder::Init(const GpuFolderOptions& options) {
  if (options.slots < 2) return InvalidArgument("GpuFolder: slots must be >= 2");
  device_ = options.device;
  // A multiple of 64 elements keeps every chunk's device offset 256-byte aligned.
  chunk_elems_ = std::max<size_t>(options.chunk_bytes / sizeof(float) / 64 * 64, 64);
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  cudaStream_t s = nullptr;
  SHOAL_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  copy_in_ = s;
  SHOAL_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  compute_ = s;
  SHOAL_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  copy_out_ = s;
  num_slots_ = options.slots;
  slots_ = std::make_unique<Slot[]>(num_slots_);
  for (int i = 0; i < num_slots_; ++i) {
    Slot& slot = slots_[i];
    SHOAL_CUDA_TRY(cudaMalloc(&slot.acc, chunk_elems_ * sizeof(float)));
    SHOAL_CUDA_TRY(cudaMalloc(&slot.x, chunk_elems_ * sizeof(float)));
    SHOAL_CUDA_TRY(cudaEventCreateWithFlags(&slot.staged, cudaEventDisableTiming));
    SHOAL_CUDA_TRY(cudaEventCreateWithFlags(&slot.folded, cudaEventDisableTiming));
    SHOAL_CUDA_TRY(cudaEventCreateWithFlags(&slot.free, cudaEventDisableTiming));
  }
  return {};
}

GpuFolder::~GpuFolder() {
  // Best effort: errors here have nobody to go to.
  cudaSetDevice(device_);
  for (void* s : {copy_in_, compute_, copy_out_}) {
    if (s != nullptr) cudaStreamSynchronize(S(s));
  }
  if (registered_base_ != nullptr) cudaHostUnregister(registered_base_);
  for (int i = 0; i < num_slots_; ++i) {
    Slot& slot = slots_[i];
    if (slot.acc) cudaFree(slot.acc);
    if (slot.x) cudaFree(slot.x);
    for (cudaEvent_t e : {slot.staged, slot.folded, slot.free}) {
      if (e) cudaEventDestroy(e);
    }
  }
  if (acc_) cudaFree(acc_);
  for (void* s : {copy_in_, compute_, copy_out_}) {
    if (s != nullptr) cudaStreamDestroy(S(s));
  }
  cudaGetLastError();
}

Status GpuFolder::RegisterHost(void* base, size_t bytes) {
  if (registered_base_ != nullptr)
    return AlreadyExists("GpuFolder: host memory already registered");
  if (base == nullptr || bytes == 0) return InvalidArgument("GpuFolder: nothing to register");
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  SHOAL_CUDA_TRY(cudaHostRegister(base, bytes, cudaHostRegisterPortable));
  registered_base_ = base;
  return {};
}

Status GpuFolder::UnregisterHost() {
  if (registered_base_ == nullptr) return {};
  SHOAL_RETURN_IF_ERROR(Synchronize());
  void* base = registered_base_;
  registered_base_ = nullptr;
  SHOAL_CUDA_TRY(cudaHostUnregister(base));
  return {};
}

Status GpuFolder::FoldHostChunk(float* acc, const std::byte* x, DType dtype, size_t n, float w) {
  Slot& slot = slots_[next_slot_++ % num_slots_];
  const size_t es = DTypeSize(dtype);
  SHOAL_CUDA_TRY(cudaStreamWaitEvent(S(copy_in_), slot.free, 0));
  SHOAL_CUDA_TRY(
      cudaMemcpyAsync(slot.acc, acc, n * sizeof(float), cudaMemcpyHostToDevice, S(copy_in_)));
  SHOAL_CUDA_TRY(cudaMemcpyAsync(slot.x, x, n * es, cudaMemcpyHostToDevice, S(copy_in_)));
  SHOAL_CUDA_TRY(cudaEventRecord(slot.staged, S(copy_in_)));
  SHOAL_CUDA_TRY(cudaStreamWaitEvent(S(compute_), slot.staged, 0));
  const void* xs[1] = {slot.x};
  SHOAL_RETURN_IF_ERROR(GpuFoldDevice(slot.acc, xs, &w, 1, dtype, n, compute_));
  SHOAL_CUDA_TRY(cudaEventRecord(slot.folded, S(compute_)));
  SHOAL_CUDA_TRY(cudaStreamWaitEvent(S(copy_out_), slot.folded, 0));
  SHOAL_CUDA_TRY(
      cudaMemcpyAsync(acc, slot.acc, n * sizeof(float), cudaMemcpyDeviceToHost, S(copy_out_)));
  SHOAL_CUDA_TRY(cudaEventRecord(slot.free, S(copy_out_)));
  return {};
}

Status GpuFolder::FoldHost(std::span<const GpuFoldSegment> segments) {
  // Chunks are pipelined across three streams with no ordering between different chunks'
  // accumulator bytes (see the header): overlapping segments would race.
  SHOAL_RETURN_IF_ERROR(CheckFoldSegments(segments));
  for (const GpuFoldSegment& seg : segments) {
    if (!IsFloatDType(seg.dtype)) {  // Q8/Q4 fold on the CPU (the leaf never sends them here)
      return InvalidArgument("GpuFolder: element type " + std::string(DTypeName(seg.dtype)) +
                             " is not a floating type");
    }
  }
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  Status st;
  for (const GpuFoldSegment& seg : segments) {
    const auto* x = static_cast<const std::byte*>(seg.x);
    const size_t es = DTypeSize(seg.dtype);
    for (size_t off = 0; off < seg.n && st.ok(); off += chunk_elems_) {
      const size_t m = std::min(chunk_elems_, seg.n - off);
      st = FoldHostChunk(seg.acc + off, x + off * es, seg.dtype, m, seg.w);
    }
    if (!st.ok()) break;
  }
  // Wait even after an error: the host buffers must not be in use when we return.
  const cudaError_t sync = cudaStreamSynchronize(S(copy_out_));
  if (!st.ok()) return st;
  if (sync != cudaSuccess) return CudaStatus("cudaStreamSynchronize (fold copy-out)", sync);
  return {};
}

Status GpuFolder::ResetAccumulator(size_t n) {
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  if (n != acc_n_) {
    SHOAL_CUDA_TRY(cudaStreamSynchronize(S(compute_)));
    if (acc_ != nullptr) SHOAL_CUDA_TRY(cudaFree(acc_));
    acc_ = nullptr;
    acc_n_ = 0;
    if (n > 0) SHOAL_CUDA_TRY(cudaMalloc(&acc_, n * sizeof(float)));
    acc_n_ = n;
  }
  if (n > 0) SHOAL_CUDA_TRY(cudaMemsetAsync(acc_, 0, n * sizeof(float), S(compute_)));
  return {};
}

Status GpuFolder::AccumulateHost(const void* x, DType dtype, float w) {
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  const auto* bytes = static_cast<const std::byte*>(x);
  const size_t es = DTypeSize(dtype);
  for (size_t off = 0; off < acc_n_; off += chunk_elems_) {
    const size_t m = std::min(chunk_elems_, acc_n_ - off);
    Slot& slot = slots_[next_slot_++ % num_slots_];
    SHOAL_CUDA_TRY(cudaStreamWaitEvent(S(copy_in_), slot.free, 0));
    SHOAL_CUDA_TRY(
        cudaMemcpyAsync(slot.x, bytes + off * es, m * es, cudaMemcpyHostToDevice, S(copy_in_)));
    SHOAL_CUDA_TRY(cudaEventRecord(slot.staged, S(copy_in_)));
    SHOAL_CUDA_TRY(cudaStreamWaitEvent(S(compute_), slot.staged, 0));
    const void* xs[1] = {slot.x};
    SHOAL_RETURN_IF_ERROR(GpuFoldDevice(acc_ + off, xs, &w, 1, dtype, m, compute_));
    SHOAL_CUDA_TRY(cudaEventRecord(slot.free, S(compute_)));
  }
  return {};
}

Status GpuFolder::AccumulateDevice(const void* const* xs, const float* ws, int count, DType dtype) {
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  for (int k = 0; k < count; k += kGpuFoldMaxBatch) {
    const int m = std::min(kGpuFoldMaxBatch, count - k);
    SHOAL_RETURN_IF_ERROR(GpuFoldDevice(acc_, xs + k, ws + k, m, dtype, acc_n_, compute_));
  }
  return {};
}

Status GpuFolder::Synchronize() {
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  for (void* s : {copy_in_, compute_, copy_out_}) SHOAL_CUDA_TRY(cudaStreamSynchronize(S(s)));
  return {};
}

Status GpuFolder::DownloadAccumulator(float* out) {
  SHOAL_RETURN_IF_ERROR(Synchronize());
  if (acc_n_ == 0) return {};
  SHOAL_CUDA_TRY(
      cudaMemcpyAsync(out, acc_, acc_n_ * sizeof(float), cudaMemcpyDeviceToHost, S(copy_out_)));
  SHOAL_CUDA_TRY(cudaStreamSynchronize(S(copy_out_)));
  return {};
}

}  // namespace shoal::aggregator
