// Kernels of the CUDA executor (see cuda_kernels.h). Each is grid-stride with 64-bit indices
// and a bounded grid, so any tensor size works with one launch configuration.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <type_traits>

#include "shoal/serving/cuda/cuda_kernels.h"

namespace shoal::inference::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

unsigned Blocks(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

#define GRID_STRIDE(i, count)                                                                \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Dispatch on the element type: F is a generic lambda taking a T* null of the right type.
template <typename F>
cudaError_t WithType(Dt t, F&& f) {
  switch (t) {
    case Dt::kF32:
      return f(static_cast<float*>(nullptr));
    case Dt::kF16:
      return f(static_cast<__half*>(nullptr));
    case Dt::kBF16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
  }
  return cudaErrorInvalidValue;
}

// out index o runs over [N, H, W, C]; the input is [N, C, H, W].
template <typename In, typename Out>
__global__ void NchwToNhwcKernel(const In* in, Out* out, int64_t n, int64_t c, int64_t hw) {
  GRID_STRIDE(o, n * c * hw) {
    const int64_t ci = o % c;
    const int64_t p = (o / c) % hw;
    const int64_t ni = o / (c * hw);
    Store(out, o, Load(in, (ni * c + ci) * hw + p));
  }
}

// out index o runs over [N, C, H, W]; the input is [N, H, W, C].
template <typename In, typename Out>
__global__ void NhwcToNchwKernel(const In* in, Out* out, int64_t n, int64_t c, int64_t hw) {
  GRID_STRIDE(o, n * c * hw) {
    const int64_t p = o % hw;
    const int64_t ci = (o / hw) % c;
    const int64_t ni = o / (c * hw);
    Store(out, o, Load(in, (ni * hw + p) * c + ci));
  }
}

template <typename T>
__global__ void PadKernel(const T* in, T* out, int64_t n, int64_t c, int64_t h, int64_t w,
                          int64_t top, int64_t left, int64_t hp, int64_t wp) {
  GRID_STRIDE(o, n * hp * wp * c) {
    const int64_t ci = o % c;
    const int64_t x = (o / c) % wp - left;
    const int64_t y = (o / (c * wp)) % hp - top;
    const int64_t ni = o / (c * wp * hp);
    const bool inside = y >= 0 && y < h && x >= 0 && x < w;
    Store(out, o, inside ? Load(in, ((ni * h + y) * w + x) * c + ci) : 0.0f);
  }
}

template <typename T>
__global__ void CastKernel(const float* in, T* out, int64_t count) {
  GRID_STRIDE(i, count) { Store(out, i, in[i]); }
}

// I is the index type: 32-bit when the tensor allows it, since 64-bit division and modulo cost
// tens of instructions per element and would make these memory-bound kernels compute-bound.
template <typename T, typename I>
__global__ void ChannelEpilogueKernel(const T* x, T* y, I count, I channels, const T* scale,
                                      const T* shift, const T* residual, bool relu) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I c = i % channels;
    float v = Load(x, i);
    if (scale != nullptr) v *= Load(scale, c);
    if (shift != nullptr) v += Load(shift, c);
    if (residual != nullptr) v += Load(residual, i);
    if (relu) v = fmaxf(v, 0.0f);
    Store(y, i, v);
  }
}

template <typename T, typename I>
__global__ void AddKernel(const T* a, const T* b, T* y, I count, I b_count, bool relu) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    float v = Load(a, i) + Load(b, i % b_count);
    if (relu) v = fmaxf(v, 0.0f);
    Store(y, i, v);
  }
}

// Whether every index below `count` plus one grid stride fits in 32 bits.
bool Fits32(int64_t count) { return count < (int64_t{1} << 31) - (int64_t{65535} * 8 * kThreads); }

template <typename T>
__global__ void PoolKernel(const T* x, T* y, Pool2d p) {
  GRID_STRIDE(o, p.n * p.oh * p.ow * p.c) {
    const int64_t c = o % p.c;
    const int64_t ox = (o / p.c) % p.ow;
    const int64_t oy = (o / (p.c * p.ow)) % p.oh;
    const int64_t n = o / (p.c * p.ow * p.oh);
    const int64_t y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
    float acc = p.max ? -FLT_MAX : 0.0f;
    int valid = 0;
    for (int ky = 0; ky < p.kh; ++ky) {
      const int64_t iy = y0 + ky;
      if (iy < 0 || iy >= p.h) continue;
      for (int kx = 0; kx < p.kw; ++kx) {
        const int64_t ix = x0 + kx;
        if (ix < 0 || ix >= p.w) continue;
        const float v = Load(x, ((n * p.h + iy) * p.w + ix) * p.c + c);
        acc = p.max ? fmaxf(acc, v) : acc + v;
        ++valid;
      }
    }
    if (!p.max) {
      // Without ceil_mode every window lies inside the padded input, so counting the padding
      // means dividing by the whole window.
      const int64_t denom = p.count_include_pad ? static_cast<int64_t>(p.kh) * p.kw : valid;
      acc = denom > 0 ? acc / static_cast<float>(denom) : 0.0f;
    }
    Store(y, o, acc);
  }
}

template <typename T>
__global__ void GlobalAvgKernel(const T* x, T* y, int64_t n, int64_t hw, int64_t c) {
  GRID_STRIDE(o, n * c) {
    const int64_t ci = o % c, ni = o / c;
    const T* base = x + ni * hw * c + ci;
    float s = 0;
    for (int64_t p = 0; p < hw; ++p) s += Load(base, p * c);
    Store(y, o, s / static_cast<float>(hw));
  }
}

__device__ float BlockReduce(float v, bool is_max, float* shared) {
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = threadIdx.x < warps ? shared[threadIdx.x] : (is_max ? -FLT_MAX : 0.0f);
  if (warp == 0) {
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float r = shared[0];
  __syncthreads();  // shared[] is reused by the next reduction
  return r;
}

// One block per row (grid-stride over rows).
template <typename T>
__global__ void SoftmaxKernel(const T* x, T* y, int64_t rows, int64_t cols) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    float m = -FLT_MAX;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, Load(xr, j));
    m = BlockReduce(m, true, shared);
    float s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += __expf(Load(xr, j) - m);
    s = BlockReduce(s, false, shared);
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      Store(yr, j, __expf(Load(xr, j) - m) * inv);
    }
  }
}

}  // namespace

size_t DtSize(Dt t) { return t == Dt::kF32 ? 4 : 2; }

cudaError_t NchwF32ToNhwc(const float* in, void* out, Dt t, int64_t n, int64_t c, int64_t h,
                          int64_t w, cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    NchwToNhwcKernel<float, T>
        <<<Blocks(n * c * h * w), kThreads, 0, s>>>(in, static_cast<T*>(out), n, c, h * w);
    return cudaGetLastError();
  });
}

cudaError_t NhwcToNchwF32(const void* in, float* out, Dt t, int64_t n, int64_t c, int64_t h,
                          int64_t w, cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    NhwcToNchwKernel<T, float>
        <<<Blocks(n * c * h * w), kThreads, 0, s>>>(static_cast<const T*>(in), out, n, c, h * w);
    return cudaGetLastError();
  });
}

cudaError_t NhwcToNchw(const void* in, void* out, Dt t, int64_t n, int64_t c, int64_t h, int64_t w,
                       cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    NhwcToNchwKernel<T, T><<<Blocks(n * c * h * w), kThreads, 0, s>>>(
        static_cast<const T*>(in), static_cast<T*>(out), n, c, h * w);
    return cudaGetLastError();
  });
}

cudaError_t NchwToNhwc(const void* in, void* out, Dt t, int64_t n, int64_t c, int64_t h, int64_t w,
                       cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    NchwToNhwcKernel<T, T><<<Blocks(n * c * h * w), kThreads, 0, s>>>(
        static_cast<const T*>(in), static_cast<T*>(out), n, c, h * w);
    return cudaGetLastError();
  });
}

cudaError_t PadNhwc(const void* in, void* out, Dt t, int64_t n, int64_t c, int64_t h, int64_t w,
                    int64_t top, int64_t left, int64_t hp, int64_t wp, cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    PadKernel<T><<<Blocks(n * hp * wp * c), kThreads, 0, s>>>(
        static_cast<const T*>(in), static_cast<T*>(out), n, c, h, w, top, left, hp, wp);
    return cudaGetLastError();
  });
}

cudaError_t CastF32(const float* in, void* out, Dt t, int64_t count, cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CastKernel<T><<<Blocks(count), kThreads, 0, s>>>(in, static_cast<T*>(out), count);
    return cudaGetLastError();
  });
}

cudaError_t ChannelEpilogue(const void* x, void* y, Dt t, int64_t count, int64_t channels,
                            const void* scale, const void* shift, const void* residual, bool relu,
                            cudaStream_t s) {
  if (channels < 1) return cudaErrorInvalidValue;
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto* xs = static_cast<const T*>(x);
    const auto* sc = static_cast<const T*>(scale);
    const auto* sh = static_cast<const T*>(shift);
    const auto* rs = static_cast<const T*>(residual);
    if (Fits32(count)) {
      ChannelEpilogueKernel<T, int32_t>
          <<<Blocks(count), kThreads, 0, s>>>(xs, static_cast<T*>(y), static_cast<int32_t>(count),
                                              static_cast<int32_t>(channels), sc, sh, rs, relu);
    } else {
      ChannelEpilogueKernel<T, int64_t><<<Blocks(count), kThreads, 0, s>>>(
          xs, static_cast<T*>(y), count, channels, sc, sh, rs, relu);
    }
    return cudaGetLastError();
  });
}

cudaError_t AddBroadcast(const void* a, const void* b, void* y, Dt t, int64_t count,
                         int64_t b_count, bool relu, cudaStream_t s) {
  if (b_count < 1) return cudaErrorInvalidValue;
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto* as = static_cast<const T*>(a);
    const auto* bs = static_cast<const T*>(b);
    if (Fits32(count)) {
      AddKernel<T, int32_t><<<Blocks(count), kThreads, 0, s>>>(as, bs, static_cast<T*>(y),
                                                               static_cast<int32_t>(count),
                                                               static_cast<int32_t>(b_count), relu);
    } else {
      AddKernel<T, int64_t>
          <<<Blocks(count), kThreads, 0, s>>>(as, bs, static_cast<T*>(y), count, b_count, relu);
    }
    return cudaGetLastError();
  });
}

cudaError_t Pool(const void* x, void* y, Dt t, const Pool2d& p, cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    PoolKernel<T><<<Blocks(p.n * p.oh * p.ow * p.c), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                                       static_cast<T*>(y), p);
    return cudaGetLastError();
  });
}

cudaError_t GlobalAveragePool(const void* x, void* y, Dt t, int64_t n, int64_t hw, int64_t c,
                              cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    GlobalAvgKernel<T>
        <<<Blocks(n * c), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n, hw, c);
    return cudaGetLastError();
  });
}

cudaError_t SoftmaxRows(const void* x, void* y, Dt t, int64_t rows, int64_t cols, cudaStream_t s) {
  return WithType(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const unsigned grid = static_cast<unsigned>(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535);
    SoftmaxKernel<T>
        <<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols);
    return cudaGetLastError();
  });
}

}  // namespace shoal::inference::cuda
