// The CUDA executor's own kernels: layout/precision conversion at the graph's edges, the
// per-channel epilogue (bias, batch-norm scale, residual add, ReLU), elementwise add/ReLU,
// NHWC pooling, global average pooling and row softmax. T is float, __half or __nv_bfloat16;
// arithmetic is float. Every launcher is asynchronous on `stream` and returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace shoal::inference::cuda {

enum class Dt : uint8_t { kF32, kF16, kBF16 };
size_t DtSize(Dt t);

// f32 [N, C, H, W] (NCHW) -> T [N, H, W, C] (NHWC); with H = W = 1 and C = n a plain cast.
cudaError_t NchwF32ToNhwc(const float* in, void* out, Dt t, int64_t n, int64_t c, int64_t h,
                          int64_t w, cudaStream_t s);
// T [N, H, W, C] -> f32 [N, C, H, W].
cudaError_t NhwcToNchwF32(const void* in, float* out, Dt t, int64_t n, int64_t c, int64_t h,
                          int64_t w, cudaStream_t s);
// T [N, H, W, C] -> T [N, C, H, W] (Flatten of a channels-last tensor in ONNX's order).
cudaError_t NhwcToNchw(const void* in, void* out, Dt t, int64_t n, int64_t c, int64_t h, int64_t w,
                       cudaStream_t s);
// T [N, C, H, W] -> T [N, H, W, C] (Reshape of a flat tensor back to 4-D).
cudaError_t NchwToNhwc(const void* in, void* out, Dt t, int64_t n, int64_t c, int64_t h, int64_t w,
                       cudaStream_t s);
cudaError_t CastF32(const float* in, void* out, Dt t, int64_t count, cudaStream_t s);
// NHWC [N, H, W, C] -> NHWC [N, hp, wp, C] with the input at (top, left) and zeros around it
// (a convolution's asymmetric padding, which cuDNN does not take).
cudaError_t PadNhwc(const void* in, void* out, Dt t, int64_t n, int64_t c, int64_t h, int64_t w,
                    int64_t top, int64_t left, int64_t hp, int64_t wp, cudaStream_t s);

// y[i] = act(x[i] * scale[c] + shift[c] + residual[i]) with c = i % channels (the innermost
// dimension: NHWC or row-major [rows, C]). scale, shift, residual may be null; y may be x.
cudaError_t ChannelEpilogue(const void* x, void* y, Dt t, int64_t count, int64_t channels,
                            const void* scale, const void* shift, const void* residual, bool relu,
                            cudaStream_t s);
// y[i] = act(a[i] + b[j]) where j = i (same shape), i % b_count (b broadcast over the innermost
// b_count elements) or 0 (b scalar): the caller passes b_count = count, channels or 1.
cudaError_t AddBroadcast(const void* a, const void* b, void* y, Dt t, int64_t count,
                         int64_t b_count, bool relu, cudaStream_t s);

struct Pool2d {
  int64_t n, c, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw;  // pad top/left; bottom/right padding is implied by oh/ow
  bool max;                    // else average
  bool count_include_pad;
};
// NHWC in, NHWC out.
cudaError_t Pool(const void* x, void* y, Dt t, const Pool2d& p, cudaStream_t s);
// NHWC [N, H, W, C] -> [N, C]: the mean over H x W.
cudaError_t GlobalAveragePool(const void* x, void* y, Dt t, int64_t n, int64_t hw, int64_t c,
                              cudaStream_t s);
// Softmax over each row of `cols` elements.
cudaError_t SoftmaxRows(const void* x, void* y, Dt t, int64_t rows, int64_t cols, cudaStream_t s);

}  // namespace shoal::inference::cuda
