// The CUDA executor's lowering of Conv (with its bias, a residual Add and Relu fused) through
// cuDNN and one epilogue kernel. The other ops: cuda_lowering.cc.
#include "shoal/serving/cuda/cuda_executor_internal.h"

namespace shoal::inference::cuda {

Status Compiler::LowerConv(size_t i) {
  const Node& n = g_.nodes[i];
#if !defined(SHOAL_HAVE_CUDNN)
  return Unsupported(n, "was built without cuDNN (set SHOAL_CUDNN_ROOT when configuring)");
#else
  auto xr = Act(n, n.inputs[0]);
  if (!xr.ok()) return xr.status();
  const Tensor* X = *xr;
  const Initializer* W = Init(n.inputs[1]);
  if (W == nullptr || W->is_int() || W->shape.size() != 4) {
    return Unsupported(n, "needs constant 4-D weights");
  }
  auto win = ReadWindow(n, {W->shape[2], W->shape[3]});
  if (!win.ok()) return win.status();
  // cuDNN pads symmetrically: other padding is applied by a pad kernel into a scratch buffer
  // that the convolution then reads unpadded.
  const bool pad_apart = win->pad_begin != win->pad_end;
  int pad_buffer = -1;
  if (pad_apart) {
    const int64_t hp = X->shape[2] + win->pad_begin[0] + win->pad_end[0];
    const int64_t wp = X->shape[3] + win->pad_begin[1] + win->pad_end[1];
    ArenaBuffer b;
    b.bytes = (static_cast<size_t>(X->shape[0] * X->shape[1] * hp * wp) * es_ + kAlign - 1) /
              kAlign * kAlign;
    b.first = b.last = static_cast<int>(emitters_.size());
    pad_buffer = static_cast<int>(buffers_.size());
    buffers_.push_back(b);
  }
  const int64_t K = W->shape[0], Cg = W->shape[1], R = W->shape[2], S = W->shape[3];
  // KCRS -> KRSC (cuDNN's NHWC filter layout).
  std::vector<float> w(W->floats.size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          w[static_cast<size_t>(((k * R + r) * S + s) * Cg + c)] =
              W->floats[static_cast<size_t>(((k * Cg + c) * R + r) * S + s)];
  auto dw = Upload(w);
  if (!dw.ok()) return dw.status();
  void* dbias = nullptr;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Initializer* b = Init(n.inputs[2]);
    if (b == nullptr || b->is_int()) return Unsupported(n, "needs a constant bias");
    auto db = Upload(b->floats);
    if (!db.ok()) return db.status();
    dbias = *db;
  }
  // Fusions: a residual Add of a tensor computed earlier, then a Relu.
  std::string out = n.outputs[0];
  const Node* next = SoleConsumer(out);
  const Tensor* residual = nullptr;
  if (next != nullptr && next->op == OpType::kAdd) {
    const std::string& other = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
    auto it = tensors_.find(other);
    if (other != out && it != tensors_.end() && it->second.shape == shapes_.at(out)) {
      residual = &it->second;
      Read(it->second);
      Skip(next);
      out = next->outputs[0];
      next = SoleConsumer(out);
    }
  }
  bool relu = false;
  if (next != nullptr && next->op == OpType::kRelu) {
    relu = true;
    Skip(next);
    out = next->outputs[0];
  }
  // Opt-in (SHOAL_CUDNN_FUSED=1): cuDNN's own conv + bias + residual + ReLU in one call, which
  // saves the epilogue's pass over the output. Off by default until checked on a GPU; where cuDNN
  // reports the combination unsupported the step falls back to the epilogue kernel.
  const char* fused_env = std::getenv("SHOAL_CUDNN_FUSED");
  const bool want_fused = relu && fused_env != nullptr && std::string(fused_env) == "1";
  void* fused_bias = dbias;
  if (want_fused && fused_bias == nullptr) {
    auto zeros = Upload(std::vector<float>(static_cast<size_t>(K), 0.0f));
    if (!zeros.ok()) return zeros.status();
    fused_bias = *zeros;
  }
  const Tensor* Y = &Out(out);
  const void* wptr = *dw;
  const Window2d wd = *win;
  Emit([this, X, Y, wptr, dbias, residual, relu, wd, K, Cg, R, S, want_fused, fused_bias,
        pad_buffer](int64_t batch, std::vector<StepFn>& steps) -> Status {
    const cudnnDataType_t t = DnnType(dt_);
    cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
    cudnnFilterDescriptor_t fd = nullptr;
    cudnnConvolutionDescriptor_t cd = nullptr;
    SHOAL_CUDNN_TRY(cudnnCreateTensorDescriptor(&xd));
    x_.cleanup_.push_back([xd] { cudnnDestroyTensorDescriptor(xd); });
    SHOAL_CUDNN_TRY(cudnnCreateTensorDescriptor(&yd));
    x_.cleanup_.push_back([yd] { cudnnDestroyTensorDescriptor(yd); });
    SHOAL_CUDNN_TRY(cudnnCreateFilterDescriptor(&fd));
    x_.cleanup_.push_back([fd] { cudnnDestroyFilterDescriptor(fd); });
    SHOAL_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&cd));
    x_.cleanup_.push_back([cd] { cudnnDestroyConvolutionDescriptor(cd); });
    const auto I = [](int64_t v) { return static_cast<int>(v); };
    // With separate padding the convolution reads the padded copy, itself unpadded.
    const int64_t xh = X->shape[2] + (pad_buffer >= 0 ? wd.pad_begin[0] + wd.pad_end[0] : 0);
    const int64_t xw = X->shape[3] + (pad_buffer >= 0 ? wd.pad_begin[1] + wd.pad_end[1] : 0);
    const int64_t conv_ph = pad_buffer >= 0 ? 0 : wd.pad_begin[0];
    const int64_t conv_pw = pad_buffer >= 0 ? 0 : wd.pad_begin[1];
    SHOAL_CUDNN_TRY(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, t, I(batch), I(X->shape[1]),
                                               I(xh), I(xw)));
    SHOAL_CUDNN_TRY(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, t, I(batch), I(Y->shape[1]),
                                               I(Y->shape[2]), I(Y->shape[3])));
    SHOAL_CUDNN_TRY(cudnnSetFilter4dDescriptor(fd, t, CUDNN_TENSOR_NHWC, I(K), I(Cg), I(R), I(S)));
    SHOAL_CUDNN_TRY(cudnnSetConvolution2dDescriptor(
        cd, I(conv_ph), I(conv_pw), I(wd.strides[0]), I(wd.strides[1]), I(wd.dilations[0]),
        I(wd.dilations[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    SHOAL_CUDNN_TRY(cudnnSetConvolutionGroupCount(cd, I(wd.group)));
    // fp32 lets cuDNN use TF32 tensor cores as PyTorch does by default (SHOAL_CUDA_NO_TF32=1
    // forbids it); fp16/bf16 use tensor cores with float accumulation.
    const char* no_tf32 = std::getenv("SHOAL_CUDA_NO_TF32");
    const cudnnMathType_t math =
        dt_ != Dt::kF32 ? CUDNN_TENSOR_OP_MATH
                        : (no_tf32 && *no_tf32 == '1' ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH);
    SHOAL_CUDNN_TRY(cudnnSetConvolutionMathType(cd, math));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    SHOAL_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(
        x_.dnn_, xd, fd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    int pick = -1;
    for (int a = 0; a < returned; ++a) {
      if (perf[a].status == CUDNN_STATUS_SUCCESS && perf[a].memory <= kMaxConvWorkspace) {
        pick = a;
        break;
      }
    }
    if (pick < 0) return Internal("cuDNN offers no convolution algorithm for this shape");
    const cudnnConvolutionFwdAlgo_t algo = perf[pick].algo;
    size_t ws = 0;
    SHOAL_CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(x_.dnn_, xd, fd, cd, yd, algo, &ws));
    x_.workspace_bytes_ = std::max(x_.workspace_bytes_, ws);
    const int64_t count = Count(*Y, batch);
    const int64_t channels = Y->shape[1];
    CudaExecutable* ex = &x_;
    const void* xin = Ptr(*X);
    void* padded =
        pad_buffer >= 0
            ? static_cast<void*>(static_cast<std::byte*>(arena_) + buffers_[pad_buffer].offset)
            : nullptr;
    const void* xp = padded != nullptr ? padded : xin;
    const int64_t in_c = X->shape[1], in_h = X->shape[2], in_w = X->shape[3];
    const int64_t top = wd.pad_begin[0], left = wd.pad_begin[1];
    void* yp = Ptr(*Y);
    const void* rp = residual ? Ptr(*residual) : nullptr;
    const Dt dt = dt_;
    cudnnTensorDescriptor_t bd = nullptr;
    cudnnActivationDescriptor_t ad = nullptr;
    if (want_fused) {
      SHOAL_CUDNN_TRY(cudnnCreateTensorDescriptor(&bd));
      x_.cleanup_.push_back([bd] { cudnnDestroyTensorDescriptor(bd); });
      SHOAL_CUDNN_TRY(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NHWC, t, 1, I(K), 1, 1));
      SHOAL_CUDNN_TRY(cudnnCreateActivationDescriptor(&ad));
      x_.cleanup_.push_back([ad] { cudnnDestroyActivationDescriptor(ad); });
      SHOAL_CUDNN_TRY(
          cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    // Decided by the first (eager, uncaptured) run: see Capture.
    auto fused = std::make_shared<bool>(want_fused);
    steps.push_back([ex, xd, yd, fd, cd, algo, ws, xp, yp, rp, wptr, dbias, relu, count, channels,
                     dt, bd, ad, fused, fused_bias, xin, padded, batch, in_c, in_h, in_w, top, left,
                     xh, xw](cudaStream_t s) -> Status {
      const float one = 1.0f, zero = 0.0f;
      if (padded != nullptr) {
        SHOAL_CUDA_TRY(PadNhwc(xin, padded, dt, batch, in_c, in_h, in_w, top, left, xh, xw, s));
      }
      if (*fused) {
        const float alpha2 = rp != nullptr ? 1.0f : 0.0f;
        const cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
            ex->dnn_, &one, xd, xp, fd, wptr, cd, algo, ex->workspace_, ws, &alpha2, yd,
            rp != nullptr ? rp : yp, bd, fused_bias, ad, yd, yp);
        if (st == CUDNN_STATUS_SUCCESS) return {};
        // cuDNN 9 codes: 2xxx bad parameter, 3xxx not supported (with sub-codes): fall back.
        const int code = static_cast<int>(st);
        if (code < 2000 || code >= 4000) {
          return Internal(std::string("cudnnConvolutionBiasActivationForward: ") +
                          cudnnGetErrorString(st));
        }
        *fused = false;  // this shape/type/algorithm: the unfused path from now on
      }
      SHOAL_CUDNN_TRY(cudnnConvolutionForward(ex->dnn_, &one, xd, xp, fd, wptr, cd, algo,
                                              ex->workspace_, ws, &zero, yd, yp));
      if (dbias != nullptr || rp != nullptr || relu) {
        SHOAL_CUDA_TRY(ChannelEpilogue(yp, yp, dt, count, channels, nullptr, dbias, rp, relu, s));
      }
      return {};
    });
    return {};
  });
  return {};
#endif
}

}  // namespace shoal::inference::cuda
