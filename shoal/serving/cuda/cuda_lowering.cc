// The CUDA executor's lowering of each ONNX op (Gemm/MatMul with their fused bias and Relu
// through cuBLASLt, Add, Relu/BatchNorm, pooling, Reshape/Flatten, Softmax) into the plan's
// steps; Conv's is cuda_lowering_conv.cc.
#include "shoal/serving/cuda/cuda_executor_internal.h"

namespace shoal::inference::cuda {

Status Compiler::LowerGemm(size_t i) {
  const Node& n = g_.nodes[i];
  auto a = Act(n, n.inputs[0]);
  if (!a.ok()) return a.status();
  Tensor& A = **a;
  if (A.nhwc) return Unsupported(n, "needs a 2-D input (Flatten first)");
  const Initializer* B = Init(n.inputs[1]);
  if (B == nullptr || B->is_int()) return Unsupported(n, "needs B to be a float constant");
  if (B->shape.size() != 2) return Unsupported(n, "needs B of rank 2");
  const bool gemm = n.op == OpType::kGemm;
  if (gemm && n.IntAttr("transA", 0) != 0) return Unsupported(n, "does not support transA=1");
  const bool tb = gemm && n.IntAttr("transB", 0) != 0;
  const float alpha = gemm ? n.FloatAttr("alpha", 1.0f) : 1.0f;
  const float beta = gemm ? n.FloatAttr("beta", 1.0f) : 1.0f;
  const int64_t K = tb ? B->shape[1] : B->shape[0], N = tb ? B->shape[0] : B->shape[1];
  std::vector<float> w(static_cast<size_t>(N * K));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < K; ++c) {
      const float v = tb ? B->floats[static_cast<size_t>(r * K + c)]
                         : B->floats[static_cast<size_t>(c * N + r)];
      w[static_cast<size_t>(r * K + c)] = alpha * v;
    }
  }
  // A bias of N values: Gemm's C ([N], [1,N] or a scalar), or a following Add of such a constant.
  std::vector<float> bias;
  auto per_column = [&](const Initializer* c, float scale) -> bool {
    if (c == nullptr || c->is_int()) return false;
    const int64_t count = Elems(c->shape);
    if (count == 1) {
      bias.assign(static_cast<size_t>(N), scale * c->floats[0]);
      return true;
    }
    if (count != N || c->shape.empty() || c->shape.back() != N) return false;
    bias.resize(static_cast<size_t>(N));
    for (int64_t j = 0; j < N; ++j)
      bias[static_cast<size_t>(j)] = scale * c->floats[static_cast<size_t>(j)];
    return true;
  };
  if (gemm && n.inputs.size() > 2 && !n.inputs[2].empty()) {
    if (!per_column(Init(n.inputs[2]), beta)) {
      return Unsupported(n, "supports C only as a constant of N values or a scalar");
    }
  }
  std::string out = n.outputs[0];
  const Node* next = SoleConsumer(out);
  if (bias.empty() && next != nullptr && next->op == OpType::kAdd) {
    const std::string& other = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
    if (per_column(Init(other), 1.0f)) {
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
  auto dw = Upload(w);
  if (!dw.ok()) return dw.status();
  void* dbias = nullptr;
  if (!bias.empty()) {
    auto db = Upload(bias);
    if (!db.ok()) return db.status();
    dbias = *db;
  }
  Tensor& Y = Out(out);
  const Tensor* pa = &A;
  const Tensor* py = &Y;
  const void* W = *dw;
  Emit([this, pa, py, W, dbias, relu, K, N](int64_t batch, std::vector<StepFn>& steps) -> Status {
    const int64_t M = Count(*pa, batch) / K;
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t desc = nullptr;
    SHOAL_CUBLAS_TRY(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
    x_.cleanup_.push_back([desc] { cublasLtMatmulDescDestroy(desc); });
    const cublasOperation_t ta = CUBLAS_OP_T, tn = CUBLAS_OP_N;
    SHOAL_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    SHOAL_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof tn));
    cublasLtEpilogue_t epi = dbias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                   : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    SHOAL_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (dbias != nullptr) {
      SHOAL_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &dbias, sizeof dbias));
      const cudaDataType_t bt = BlasType(dt_);
      SHOAL_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &bt, sizeof bt));
    }
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    const cudaDataType_t t = BlasType(dt_);
    SHOAL_CUBLAS_TRY(
        cublasLtMatrixLayoutCreate(&la, t, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
    x_.cleanup_.push_back([la] { cublasLtMatrixLayoutDestroy(la); });
    SHOAL_CUBLAS_TRY(
        cublasLtMatrixLayoutCreate(&lb, t, static_cast<uint64_t>(K), static_cast<uint64_t>(M), K));
    x_.cleanup_.push_back([lb] { cublasLtMatrixLayoutDestroy(lb); });
    SHOAL_CUBLAS_TRY(
        cublasLtMatrixLayoutCreate(&ld, t, static_cast<uint64_t>(N), static_cast<uint64_t>(M), N));
    x_.cleanup_.push_back([ld] { cublasLtMatrixLayoutDestroy(ld); });
    cublasLtMatmulPreference_t pref = nullptr;
    SHOAL_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    x_.cleanup_.push_back([pref] { cublasLtMatmulPreferenceDestroy(pref); });
    const size_t ws = kCublasWorkspace;
    SHOAL_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    SHOAL_CUBLAS_TRY(
        cublasLtMatmulAlgoGetHeuristic(x_.lt_, desc, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found < 1) {
      return Internal("cuBLASLt has no algorithm for a " + std::to_string(M) + "x" +
                      std::to_string(N) + "x" + std::to_string(K) + " matmul");
    }
    x_.workspace_bytes_ = std::max(x_.workspace_bytes_, heur.workspaceSize);
    const cublasLtMatmulAlgo_t algo = heur.algo;
    const size_t algo_ws = heur.workspaceSize;
    CudaExecutable* ex = &x_;
    const void* a = Ptr(*pa);
    void* y = Ptr(*py);
    steps.push_back([ex, desc, la, lb, ld, algo, algo_ws, W, a, y](cudaStream_t s) -> Status {
      const float one = 1.0f, zero = 0.0f;
      SHOAL_CUBLAS_TRY(cublasLtMatmul(ex->lt_, desc, &one, W, la, a, lb, &zero, y, ld, y, ld, &algo,
                                      ex->workspace_, algo_ws, s));
      return {};
    });
    return {};
  });
  return {};
}

// Add of two computed tensors of one shape, or of a computed tensor and a constant that is a
// scalar, one value per innermost channel, or one sample's worth (plain layout only).
Status Compiler::LowerAdd(size_t i) {
  const Node& n = g_.nodes[i];
  const Initializer* c0 = Init(n.inputs[0]);
  const Initializer* c1 = Init(n.inputs[1]);
  if (c0 != nullptr && c1 != nullptr) return Unsupported(n, "does not add two constants");
  const std::string& act_name = c0 != nullptr ? n.inputs[1] : n.inputs[0];
  auto ar = Act(n, act_name);
  if (!ar.ok()) return ar.status();
  const Tensor* A = *ar;
  const Tensor* B = nullptr;
  void* constant = nullptr;
  int64_t b_per_sample = 0;  // 0: the same count as A; else broadcast over this many
  const Initializer* c = c0 != nullptr ? c0 : c1;
  if (c == nullptr) {
    auto br = Act(n, n.inputs[1]);
    if (!br.ok()) return br.status();
    B = *br;
    if (B->shape != A->shape) return Unsupported(n, "adds computed tensors of one shape only");
  } else {
    if (c->is_int()) return Unsupported(n, "adds float constants only");
    Shape cs = c->shape;
    while (!cs.empty() && cs.front() == 1) cs.erase(cs.begin());
    const int64_t count = Elems(c->shape);
    const int64_t channels = A->nhwc ? A->shape[1] : A->shape.back();
    const bool per_channel =
        A->nhwc ? (count == channels && (cs == Shape{channels, 1, 1} || (channels == 1)))
                : (count == channels && (cs == Shape{channels} || channels == 1));
    const Shape sample(A->shape.begin() + 1, A->shape.end());
    if (count == 1 || per_channel) {
      b_per_sample = count;
    } else if (!A->nhwc && (cs == sample || c->shape == sample)) {
      b_per_sample = count;  // one sample's values, repeated per sample
    } else {
      return Unsupported(n, "cannot broadcast constant '" + (c0 ? n.inputs[0] : n.inputs[1]) +
                                "' " + ShapeToString(c->shape) + " over " +
                                ShapeToString(A->shape));
    }
    auto d = Upload(c->floats);
    if (!d.ok()) return d.status();
    constant = *d;
  }
  std::string out = n.outputs[0];
  bool relu = false;
  if (const Node* next = SoleConsumer(out); next != nullptr && next->op == OpType::kRelu) {
    relu = true;
    Skip(next);
    out = next->outputs[0];
  }
  const Tensor* Y = &Out(out);
  Emit([this, A, B, Y, constant, b_per_sample, relu](int64_t batch, std::vector<StepFn>& steps) {
    const int64_t count = Count(*A, batch);
    const void* a = Ptr(*A);
    const void* b = B != nullptr ? Ptr(*B) : constant;
    void* y = Ptr(*Y);
    const int64_t b_count = B != nullptr ? count : b_per_sample;
    const Dt dt = dt_;
    steps.push_back([a, b, y, dt, count, b_count, relu](cudaStream_t s) -> Status {
      SHOAL_CUDA_TRY(AddBroadcast(a, b, y, dt, count, b_count, relu, s));
      return {};
    });
    return Status{};
  });
  return {};
}

// Relu alone, or a BatchNormalization that FoldBatchNorm left (not after a Conv or Gemm): both
// are the per-channel epilogue.
Status Compiler::LowerReluOrBn(size_t i) {
  const Node& n = g_.nodes[i];
  auto xr = Act(n, n.inputs[0]);
  if (!xr.ok()) return xr.status();
  const Tensor* X = *xr;
  void* scale = nullptr;
  void* shift = nullptr;
  int64_t channels = 1;
  if (n.op == OpType::kBatchNormalization) {
    if (!X->nhwc && X->shape.size() != 2) return Unsupported(n, "needs [N,C] or [N,C,H,W]");
    channels = X->shape[1];
    const Initializer* p[4];
    for (int k = 0; k < 4; ++k) {
      p[k] = Init(n.inputs[static_cast<size_t>(k + 1)]);
      if (p[k] == nullptr || p[k]->is_int() || Elems(p[k]->shape) != channels) {
        return Unsupported(n, "needs constant per-channel parameters");
      }
    }
    const float eps = n.FloatAttr("epsilon", 1e-5f);
    std::vector<float> a(static_cast<size_t>(channels)), b(a.size());
    for (size_t c = 0; c < a.size(); ++c) {
      a[c] = p[0]->floats[c] / std::sqrt(p[3]->floats[c] + eps);
      b[c] = p[1]->floats[c] - p[2]->floats[c] * a[c];
    }
    auto da = Upload(a);
    if (!da.ok()) return da.status();
    auto db = Upload(b);
    if (!db.ok()) return db.status();
    scale = *da;
    shift = *db;
  }
  std::string out = n.outputs[0];
  bool relu = n.op == OpType::kRelu;
  if (!relu) {
    if (const Node* next = SoleConsumer(out); next != nullptr && next->op == OpType::kRelu) {
      relu = true;
      Skip(next);
      out = next->outputs[0];
    }
  }
  const Tensor* Y = &Out(out);
  Emit([this, X, Y, scale, shift, channels, relu](int64_t batch, std::vector<StepFn>& steps) {
    const int64_t count = Count(*X, batch);
    const void* x = Ptr(*X);
    void* y = Ptr(*Y);
    const Dt dt = dt_;
    steps.push_back([x, y, dt, count, channels, scale, shift, relu](cudaStream_t s) -> Status {
      SHOAL_CUDA_TRY(ChannelEpilogue(x, y, dt, count, channels, scale, shift, nullptr, relu, s));
      return {};
    });
    return Status{};
  });
  return {};
}

Status Compiler::LowerPool(size_t i) {
  const Node& n = g_.nodes[i];
  auto xr = Act(n, n.inputs[0]);
  if (!xr.ok()) return xr.status();
  const Tensor* X = *xr;
  if (!X->nhwc) return Unsupported(n, "needs a 4-D input");
  auto win = ReadWindow(n, {0, 0});
  if (!win.ok()) return win.status();
  const Tensor* Y = &Out(n.outputs[0]);
  Pool2d p{};
  p.c = X->shape[1];
  p.h = X->shape[2];
  p.w = X->shape[3];
  p.oh = Y->shape[2];
  p.ow = Y->shape[3];
  p.kh = static_cast<int>(win->kernel[0]);
  p.kw = static_cast<int>(win->kernel[1]);
  p.sh = static_cast<int>(win->strides[0]);
  p.sw = static_cast<int>(win->strides[1]);
  p.ph = static_cast<int>(win->pad_begin[0]);
  p.pw = static_cast<int>(win->pad_begin[1]);
  p.max = n.op == OpType::kMaxPool;
  p.count_include_pad = n.IntAttr("count_include_pad", 0) != 0;
  Emit([this, X, Y, p](int64_t batch, std::vector<StepFn>& steps) {
    Pool2d q = p;
    q.n = batch;
    const void* x = Ptr(*X);
    void* y = Ptr(*Y);
    const Dt dt = dt_;
    steps.push_back([x, y, dt, q](cudaStream_t s) -> Status {
      SHOAL_CUDA_TRY(Pool(x, y, dt, q, s));
      return {};
    });
    return Status{};
  });
  return {};
}

Status Compiler::LowerGlobalAvg(size_t i) {
  const Node& n = g_.nodes[i];
  auto xr = Act(n, n.inputs[0]);
  if (!xr.ok()) return xr.status();
  const Tensor* X = *xr;
  if (!X->nhwc) return Unsupported(n, "needs a 4-D input");
  const Tensor* Y = &Out(n.outputs[0]);
  Emit([this, X, Y](int64_t batch, std::vector<StepFn>& steps) {
    const int64_t hw = X->shape[2] * X->shape[3], c = X->shape[1];
    const void* x = Ptr(*X);
    void* y = Ptr(*Y);
    const Dt dt = dt_;
    steps.push_back([x, y, dt, batch, hw, c](cudaStream_t s) -> Status {
      SHOAL_CUDA_TRY(GlobalAveragePool(x, y, dt, batch, hw, c, s));
      return {};
    });
    return Status{};
  });
  return {};
}

// Flatten and Reshape: the bytes stay, unless channels-last storage has to become ONNX's
// channels-first order (or back).
Status Compiler::LowerReshape(size_t i) {
  const Node& n = g_.nodes[i];
  auto xr = Act(n, n.inputs[0]);
  if (!xr.ok()) return xr.status();
  const Tensor* X = *xr;
  const Tensor* Y = &Out(n.outputs[0]);
  enum { kCopy, kToNchw, kToNhwc } how = kCopy;
  const Tensor* four = nullptr;
  if (X->nhwc && Y->nhwc) {
    if (X->shape != Y->shape) return Unsupported(n, "does not reshape between 4-D shapes");
  } else if (X->nhwc && X->shape[2] * X->shape[3] > 1) {
    how = kToNchw;
    four = X;
  } else if (Y->nhwc && Y->shape[2] * Y->shape[3] > 1) {
    how = kToNhwc;
    four = Y;
  }
  Emit([this, X, Y, how, four](int64_t batch, std::vector<StepFn>& steps) {
    const size_t bytes = static_cast<size_t>(Count(*X, batch)) * es_;
    const void* x = Ptr(*X);
    void* y = Ptr(*Y);
    const Dt dt = dt_;
    const int64_t c = four ? four->shape[1] : 0, h = four ? four->shape[2] : 0,
                  w = four ? four->shape[3] : 0;
    steps.push_back([x, y, dt, bytes, how, batch, c, h, w](cudaStream_t s) -> Status {
      if (how == kCopy) {
        SHOAL_CUDA_TRY(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s));
      } else if (how == kToNchw) {
        SHOAL_CUDA_TRY(NhwcToNchw(x, y, dt, batch, c, h, w, s));
      } else {
        SHOAL_CUDA_TRY(NchwToNhwc(x, y, dt, batch, c, h, w, s));
      }
      return {};
    });
    return Status{};
  });
  return {};
}

Status Compiler::LowerSoftmax(size_t i) {
  const Node& n = g_.nodes[i];
  auto xr = Act(n, n.inputs[0]);
  if (!xr.ok()) return xr.status();
  const Tensor* X = *xr;
  const auto rank = static_cast<int64_t>(X->shape.size());
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", -1), rank);
  if (axis < 0) return InvalidArgument(Label(n) + ": axis out of range");
  int64_t cols = 0;
  if (X->nhwc) {
    if (axis != 1) return Unsupported(n, "supports softmax over channels only for 4-D inputs");
    cols = X->shape[1];
  } else {
    const Shape rest(X->shape.begin() + axis + 1, X->shape.end());
    if (Elems(rest) != 1) return Unsupported(n, "supports softmax over the innermost axis only");
    cols = X->shape[static_cast<size_t>(axis)];
  }
  const Tensor* Y = &Out(n.outputs[0]);
  Emit([this, X, Y, cols](int64_t batch, std::vector<StepFn>& steps) {
    const int64_t rows = Count(*X, batch) / cols;
    const void* x = Ptr(*X);
    void* y = Ptr(*Y);
    const Dt dt = dt_;
    steps.push_back([x, y, dt, rows, cols](cudaStream_t s) -> Status {
      SHOAL_CUDA_TRY(SoftmaxRows(x, y, dt, rows, cols, s));
      return {};
    });
    return Status{};
  });
  return {};
}

Status Compiler::Lower(size_t i) {
  const Node& n = g_.nodes[i];
  if (skipped_.count(&n)) return {};
  switch (n.op) {
    case OpType::kGemm:
    case OpType::kMatMul:
      return LowerGemm(i);
    case OpType::kConv:
      return LowerConv(i);
    case OpType::kAdd:
      return LowerAdd(i);
    case OpType::kRelu:
    case OpType::kBatchNormalization:
      return LowerReluOrBn(i);
    case OpType::kMaxPool:
    case OpType::kAveragePool:
      return LowerPool(i);
    case OpType::kGlobalAveragePool:
      return LowerGlobalAvg(i);
    case OpType::kFlatten:
    case OpType::kReshape:
      return LowerReshape(i);
    case OpType::kSoftmax:
      return LowerSoftmax(i);
    default:  // the transformer and plain-kernel operators run on the CPU executor only
      break;
  }
  return Unsupported(n, "does not run this operator");
}

}  // namespace shoal::inference::cuda
