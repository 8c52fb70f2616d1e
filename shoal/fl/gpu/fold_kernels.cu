// The fold's CUDA kernels: acc[i] = fma(w_k, x_k[i], acc[i]) over a batch of updates, 8
// elements per thread per step (two 16-byte loads/stores of acc; one 16-byte load of a bf16/f16
// update, two of an f32 one), grid-stride. Updates are read once, so their loads bypass L1 and
// are marked evict-first (__ldcs); acc stays in registers across the batch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "shoal/common/cuda_status.h"
#include "shoal/fl/gpu/gpu_fold.h"

namespace shoal::aggregator {
namespace {

constexpr int kVec = 8;  // elements per thread per step
constexpr int kThreads = 256;

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

struct BatchArgs {
  const void* x[kGpuFoldMaxBatch];
  float w[kGpuFoldMaxBatch];
  int count;
};

__device__ __forceinline__ float ToF32(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float ToF32(const Bf16* p, size_t i) {
  return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16);
}
__device__ __forceinline__ float ToF32(const F16* p, size_t i) {
  return __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(p)[i]));
}

// Eight consecutive elements starting at p (16-byte aligned), widened to float.
__device__ __forceinline__ void Load8(const float* p, float v[kVec]) {
  const float4 a = __ldcs(reinterpret_cast<const float4*>(p));
  const float4 b = __ldcs(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x;
  v[1] = a.y;
  v[2] = a.z;
  v[3] = a.w;
  v[4] = b.x;
  v[5] = b.y;
  v[6] = b.z;
  v[7] = b.w;
}
__device__ __forceinline__ void Unpack2Bf16(uint32_t u, float* v) {
  v[0] = __uint_as_float(u << 16);
  v[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ void Load8(const Bf16* p, float v[kVec]) {
  const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  Unpack2Bf16(u.x, v);
  Unpack2Bf16(u.y, v + 2);
  Unpack2Bf16(u.z, v + 4);
  Unpack2Bf16(u.w, v + 6);
}
__device__ __forceinline__ void Unpack2F16(uint32_t u, float* v) {
  v[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)));
  v[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
}
__device__ __forceinline__ void Load8(const F16* p, float v[kVec]) {
  const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
  Unpack2F16(u.x, v);
  Unpack2F16(u.y, v + 2);
  Unpack2F16(u.z, v + 4);
  Unpack2F16(u.w, v + 6);
}

// acc and every x are 16-byte aligned; nvec groups of 8 elements.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FoldVec(float* __restrict__ acc, const BatchArgs args, size_t nvec) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec;
       i += stride) {
    float4* a4 = reinterpret_cast<float4*>(acc + i * kVec);
    const float4 a0 = a4[0];
    const float4 a1 = a4[1];
    float r[kVec] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    int k = 0;
    // Two updates per step: their loads are independent, so both are in flight at once.
    for (; k + 1 < args.count; k += 2) {
      float v0[kVec], v1[kVec];
      Load8(static_cast<const T*>(args.x[k]) + i * kVec, v0);
      Load8(static_cast<const T*>(args.x[k + 1]) + i * kVec, v1);
      const float w0 = args.w[k], w1 = args.w[k + 1];
#pragma unroll
      for (int j = 0; j < kVec; ++j) r[j] = fmaf(w0, v0[j], r[j]);
#pragma unroll
      for (int j = 0; j < kVec; ++j) r[j] = fmaf(w1, v1[j], r[j]);
    }
    if (k < args.count) {
      float v0[kVec];
      Load8(static_cast<const T*>(args.x[k]) + i * kVec, v0);
      const float w0 = args.w[k];
#pragma unroll
      for (int j = 0; j < kVec; ++j) r[j] = fmaf(w0, v0[j], r[j]);
    }
    a4[0] = make_float4(r[0], r[1], r[2], r[3]);
    a4[1] = make_float4(r[4], r[5], r[6], r[7]);
  }
}

// Scalar loads for the elements the vector kernel cannot take: indices [0, head) and
// [tail, n), or everything (head = n) when acc and the updates cannot be aligned together.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FoldScalar(float* __restrict__ acc, const BatchArgs args, size_t head, size_t tail, size_t n) {
  const size_t count = head + (n - tail);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count;
       j += stride) {
    const size_t i = j < head ? j : tail + (j - head);
    float r = acc[i];
    for (int k = 0; k < args.count; ++k) {
      r = fmaf(args.w[k], ToF32(static_cast<const T*>(args.x[k]), i), r);
    }
    acc[i] = r;
  }
}

// One thread per 8-element group (the grid-stride loop only matters past 2^31 - 1 blocks): with
// a batch of updates per group, a capped grid would leave a partly idle last wave (5.4 waves of
// a ResNet-18 update run as 6), while many short blocks keep every SM busy to the end.
unsigned Blocks(size_t work) {
  const size_t need = (work + kThreads - 1) / kThreads;
  constexpr size_t kMaxGrid = 0x7fffffff;
  return static_cast<unsigned>(need < kMaxGrid ? need : kMaxGrid);
}

template <typename T>
Status Launch(float* acc, const BatchArgs& args, size_t n, cudaStream_t stream) {
  constexpr size_t es = sizeof(T);
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  // head: elements until acc is 16-byte aligned; every x must then be 16-byte aligned too.
  size_t head = ((16 - addr(acc) % 16) % 16) / sizeof(float);
  for (int k = 0; k < args.count; ++k) {
    if ((addr(args.x[k]) + head * es) % 16 != 0) head = n;  // cannot line up: all scalar
  }
  if (head > n) head = n;
  const size_t nvec = (n - head) / kVec;
  const size_t tail = head + nvec * kVec;
  if (nvec > 0) {
    BatchArgs shifted = args;
    for (int k = 0; k < args.count; ++k) {
      shifted.x[k] = static_cast<const std::byte*>(args.x[k]) + head * es;
    }
    FoldVec<T><<<Blocks(nvec), kThreads, 0, stream>>>(acc + head, shifted, nvec);
    SHOAL_CUDA_TRY(cudaGetLastError());
  }
  if (head + (n - tail) > 0) {
    FoldScalar<T><<<Blocks(head + (n - tail)), kThreads, 0, stream>>>(acc, args, head, tail, n);
    SHOAL_CUDA_TRY(cudaGetLastError());
  }
  return {};
}

}  // namespace

bool GpuFoldAvailable(std::string* reason) {
  std::string problem = CudaDeviceProblem();
  if (reason != nullptr) *reason = problem;
  return problem.empty();
}

Status GpuFoldDevice(float* acc, const void* const* xs, const float* ws, int count, DType dtype,
                     size_t n, void* stream) {
  if (count < 0 || count > kGpuFoldMaxBatch) {
    return InvalidArgument("GpuFoldDevice: " + std::to_string(count) +
                           " updates in one batch (at most " + std::to_string(kGpuFoldMaxBatch) +
                           ")");
  }
  if (n == 0 || count == 0) return {};
  if (!IsFloatDType(dtype)) {
    return InvalidArgument("GpuFoldDevice: element type " + std::string(DTypeName(dtype)) +
                           " is not a floating type (Q8/Q4 fold on the CPU)");
  }
  const size_t es = DTypeSize(dtype);
  if (acc == nullptr || reinterpret_cast<uintptr_t>(acc) % sizeof(float) != 0) {
    return InvalidArgument("GpuFoldDevice: accumulator is null or not 4-byte aligned");
  }
  BatchArgs args{};
  args.count = count;
  for (int k = 0; k < count; ++k) {
    if (xs[k] == nullptr || reinterpret_cast<uintptr_t>(xs[k]) % es != 0) {
      return InvalidArgument("GpuFoldDevice: update " + std::to_string(k) +
                             " is null or not aligned to its element size");
    }
    args.x[k] = xs[k];
    args.w[k] = ws[k];
  }
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kF32:
      return Launch<float>(acc, args, n, s);
    case DType::kBF16:
      return Launch<Bf16>(acc, args, n, s);
    case DType::kF16:
      return Launch<F16>(acc, args, n, s);
    case DType::kI64:
    case DType::kU32:
    case DType::kQ8:
    case DType::kQ4:
      break;
  }
  return InvalidArgument("GpuFoldDevice: element type " + std::string(DTypeName(dtype)) +
                         " is not a floating type");
}

}  // namespace shoal::aggregator
