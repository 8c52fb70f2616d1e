// The CUDA executor. Compile lowers the graph once: weights converted to the compute precision
// (and to cuDNN's KRSC filter layout), rank-4 activations kept channels-last (NHWC), every
// intermediate placed in one device arena by lifetime, and, per batch-size bucket, cuDNN and
// cuBLASLt descriptors and algorithms chosen, and each bucket captured once as a CUDA graph (a
// bucket whose capture fails runs eagerly, kernel by kernel, and execution_mode() says why; it
// is never captured again). Run copies the input in, launches the bucket's graph (or its steps)
// and copies the output back, all on the executable's one stream.
//
// Fusions: Gemm/MatMul take a following Add of a per-column constant as their bias and a
// following Relu into cuBLASLt's epilogue; Conv takes its bias, a following residual Add and a
// following Relu into one epilogue kernel after cuDNN's convolution.
#include "cuda_module_api.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#if defined(SHOAL_HAVE_CUDNN)
#include <cudnn.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "cuda_kernels.h"
#include "shape_inference.h"
#include "shoal/common/cuda_status.h"

namespace shoal::inference {
namespace cuda {
namespace {

using Shape = std::vector<int64_t>;
using StepFn = std::function<Status(cudaStream_t)>;

#define SHOAL_CUBLAS_TRY(call)                                                              \
  do {                                                                                      \
    const cublasStatus_t shoal_blas_st_ = (call);                                           \
    if (shoal_blas_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
      return Internal(std::string(#call) + ": " + cublasLtGetStatusString(shoal_blas_st_)); \
    }                                                                                       \
  } while (0)

#if defined(SHOAL_HAVE_CUDNN)
#define SHOAL_CUDNN_TRY(call)                                                          \
  do {                                                                                 \
    const cudnnStatus_t shoal_dnn_st_ = (call);                                        \
    if (shoal_dnn_st_ != CUDNN_STATUS_SUCCESS) {                                       \
      return Internal(std::string(#call) + ": " + cudnnGetErrorString(shoal_dnn_st_)); \
    }                                                                                  \
  } while (0)
#endif

constexpr size_t kAlign = 256;
constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kMaxConvWorkspace = size_t{1} << 30;

int64_t Elems(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

std::string Label(const Node& n) {
  return "node '" + n.name + "' (" + std::string(OpTypeName(n.op)) + ")";
}
Status Unsupported(const Node& n, const std::string& what) {
  return InvalidArgument(Label(n) + ": the CUDA executor " + what);
}

Dt DtOf(Precision p) {
  switch (p) {
    case Precision::kF32:
      return Dt::kF32;
    case Precision::kF16:
      return Dt::kF16;
    case Precision::kBF16:
      return Dt::kBF16;
  }
  return Dt::kF32;
}
cudaDataType_t BlasType(Dt t) {
  return t == Dt::kF32 ? CUDA_R_32F : (t == Dt::kF16 ? CUDA_R_16F : CUDA_R_16BF);
}
#if defined(SHOAL_HAVE_CUDNN)
cudnnDataType_t DnnType(Dt t) {
  return t == Dt::kF32 ? CUDNN_DATA_FLOAT : (t == Dt::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16);
}
#endif

// A device tensor of the plan: where it lives and how. Rank-4 activations are NHWC.
struct Tensor {
  Shape shape;  // ONNX (logical) shape at max_batch
  bool nhwc = false;
  int buffer = -1;  // arena buffer
};

struct ArenaBuffer {
  size_t bytes = 0;
  int first = 0, last = 0;  // lowered-op indices that write it first and read it last
  size_t offset = 0;
};

}  // namespace

struct Bucket {
  int64_t batch = 0;
  std::vector<StepFn> steps;
  cudaGraphExec_t exec = nullptr;  // null: the steps run one by one, for eager_reason
  std::string eager_reason;
};

class CudaExecutable final : public Executable {
 public:
  ~CudaExecutable() override;
  Status Run(const BatchIO& io) override;
  const std::vector<int64_t>& input_shape() const override { return in_shape_; }
  const std::vector<int64_t>& output_shape() const override { return out_shape_; }
  ExecutionMode execution_mode() const override;

 private:
  friend class Compiler;
  // Once per bucket, when the executable is compiled (never again in Run): a bucket whose
  // capture fails keeps eager_reason and runs its steps one by one.
  Status CaptureBuckets();
  Status Capture(Bucket& b);

  int device_ = 0;
  int64_t max_batch_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
#if defined(SHOAL_HAVE_CUDNN)
  cudnnHandle_t dnn_ = nullptr;
#endif
  std::vector<void*> allocations_;
  std::vector<std::function<void()>> cleanup_;  // descriptors, in creation order
  float* d_in_ = nullptr;                       // f32, the caller's layout, max_batch samples
  float* d_out_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> in_shape_, out_shape_;
  int64_t in_elems_ = 0, out_elems_ = 0;  // per sample
  bool use_graphs_ = true;
  bool capture_fault_ = false;  // SHOAL_CUDA_GRAPH_CAPTURE_FAULT=1: every capture fails (tests)
};

CudaExecutable::~CudaExecutable() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (Bucket& b : buckets_) {
    if (b.exec != nullptr) cudaGraphExecDestroy(b.exec);
  }
  for (auto it = cleanup_.rbegin(); it != cleanup_.rend(); ++it) (*it)();
#if defined(SHOAL_HAVE_CUDNN)
  if (dnn_ != nullptr) cudnnDestroy(dnn_);
#endif
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  for (void* p : allocations_) cudaFree(p);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

ExecutionMode CudaExecutable::execution_mode() const {
  ExecutionMode m;
  for (const Bucket& b : buckets_) {
    if (b.exec != nullptr) {
      ++m.graph_buckets;
    } else {
      ++m.eager_buckets;
      if (m.eager_reason.empty()) m.eager_reason = b.eager_reason;
    }
  }
  return m;
}

Status CudaExecutable::CaptureBuckets() {
  // The warm-up passes read the input buffer: zeros, not whatever cudaMalloc left there.
  SHOAL_CUDA_TRY(cudaMemsetAsync(
      d_in_, 0, static_cast<size_t>(max_batch_ * in_elems_) * sizeof(float), stream_));
  for (Bucket& b : buckets_) {
    if (!use_graphs_) {
      b.eager_reason = "CUDA graphs are off (SHOAL_CUDA_GRAPHS=0)";
      continue;
    }
    const Status st = Capture(b);
    if (!st.ok()) {
      b.eager_reason = "capturing the batch-" + std::to_string(b.batch) +
                       " bucket as a CUDA graph failed: " + st.ToString();
    }
  }
  // A failed capture leaves nothing queued; an error the warm-up or a capture left on the
  // stream shows here.
  SHOAL_CUDA_TRY(cudaStreamSynchronize(stream_));
  return {};
}

Status CudaExecutable::Capture(Bucket& b) {
  // One eager pass first (as PyTorch warms up before capturing): cuDNN and cuBLASLt load their
  // kernels and set up per-handle state on first use, which must not happen inside a capture.
  for (const StepFn& step : b.steps) SHOAL_RETURN_IF_ERROR(step(stream_));
  SHOAL_CUDA_TRY(cudaStreamSynchronize(stream_));
  SHOAL_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  Status st;
  for (const StepFn& step : b.steps) {
    st = step(stream_);
    if (!st.ok()) break;
  }
  if (st.ok() && capture_fault_) {
    // Not allowed while the stream captures: CUDA invalidates the capture, as an operation
    // that cannot be captured would.
    const cudaError_t e = cudaStreamSynchronize(stream_);
    st = CudaStatus("SHOAL_CUDA_GRAPH_CAPTURE_FAULT: cudaStreamSynchronize while capturing",
                    e == cudaSuccess ? cudaErrorStreamCaptureUnsupported : e);
  }
  // End the capture whatever happened, so the stream runs work again; an invalidated capture
  // ends with an error and no graph.
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (st.ok() && end != cudaSuccess) st = CudaStatus("cudaStreamEndCapture", end);
  if (st.ok()) {
    const cudaError_t inst = cudaGraphInstantiate(&b.exec, graph, 0);
    if (inst != cudaSuccess) {
      b.exec = nullptr;
      st = CudaStatus("cudaGraphInstantiate", inst);
    }
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  // The capture's errors are not sticky: clear them, or the next kernel launch's
  // cudaGetLastError check would report them as its own.
  if (!st.ok()) cudaGetLastError();
  return st;
}

Status CudaExecutable::Run(const BatchIO& io) {
  if (io.batch < 1 || io.batch > max_batch_) {
    return InvalidArgument("batch " + std::to_string(io.batch) + " is outside 1.." +
                           std::to_string(max_batch_));
  }
  const auto in_n = static_cast<size_t>(io.batch * in_elems_);
  const auto out_n = static_cast<size_t>(io.batch * out_elems_);
  if (io.input.size() != in_n) {
    return InvalidArgument("input has " + std::to_string(io.input.size()) + " values, expected " +
                           std::to_string(in_n) + " (batch " + std::to_string(io.batch) + " x " +
                           ShapeToString(in_shape_) + ")");
  }
  if (io.output.size() != out_n) {
    return InvalidArgument("output has room for " + std::to_string(io.output.size()) +
                           " values, expected " + std::to_string(out_n));
  }
  auto it = std::find_if(buckets_.begin(), buckets_.end(),
                         [&](const Bucket& b) { return b.batch >= io.batch; });
  Bucket& b = *it;  // the last bucket is max_batch_, so one always fits
  SHOAL_CUDA_TRY(cudaSetDevice(device_));
  SHOAL_CUDA_TRY(cudaMemcpyAsync(d_in_, io.input.data(), in_n * sizeof(float),
                                 cudaMemcpyHostToDevice, stream_));
  if (b.batch > io.batch) {
    // The bucket's extra samples: zeros, so they compute finite values nobody reads.
    SHOAL_CUDA_TRY(cudaMemsetAsync(
        d_in_ + in_n, 0, static_cast<size_t>(b.batch * in_elems_ - in_n) * sizeof(float), stream_));
  }
  if (b.exec != nullptr) {
    SHOAL_CUDA_TRY(cudaGraphLaunch(b.exec, stream_));
  } else {
    for (const StepFn& step : b.steps) SHOAL_RETURN_IF_ERROR(step(stream_));
  }
  SHOAL_CUDA_TRY(cudaMemcpyAsync(io.output.data(), d_out_, out_n * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
  SHOAL_CUDA_TRY(cudaStreamSynchronize(stream_));
  return {};
}

// Lowers one graph into a CudaExecutable (see the file comment).
class Compiler {
 public:
  Compiler(const Graph& g, const ExecutorOptions& o, CudaExecutable& x)
      : g_(g), opt_(o), x_(x), dt_(DtOf(o.precision)), es_(DtSize(DtOf(o.precision))) {}

  Status Build();

 private:
  // A lowered operation: emits its steps for one bucket (descriptors made here, once).
  using Emitter = std::function<Status(int64_t batch, std::vector<StepFn>& steps)>;

  Status Lower(size_t i);
  Status LowerGemm(size_t i);
  Status LowerConv(size_t i);
  Status LowerAdd(size_t i);
  Status LowerReluOrBn(size_t i);
  Status LowerPool(size_t i);
  Status LowerGlobalAvg(size_t i);
  Status LowerReshape(size_t i);
  Status LowerSoftmax(size_t i);

  // The activation named `name` (an error naming the node when it is a constant or unknown).
  Result<Tensor*> Act(const Node& n, const std::string& name);
  // Creates the output tensor `name` written by the op being lowered.
  Tensor& Out(const std::string& name);
  void Read(const Tensor& t) { buffers_[t.buffer].last = static_cast<int>(emitters_.size()); }
  void Emit(Emitter e) { emitters_.push_back(std::move(e)); }
  void* Ptr(const Tensor& t) const {
    return static_cast<std::byte*>(arena_) + buffers_[t.buffer].offset;
  }
  // Samples-to-rows: dimension 0 of every activation is the batch, scaled to `batch`.
  int64_t Dim0(const Tensor& t, int64_t batch) const { return t.shape[0] / opt_.max_batch * batch; }
  int64_t Count(const Tensor& t, int64_t batch) const {
    return Elems(t.shape) / opt_.max_batch * batch;
  }
  // Uploads f32 values as the compute type.
  Result<void*> Upload(const std::vector<float>& values);
  const Initializer* Init(const std::string& name) const {
    auto it = g_.initializers.find(name);
    return it == g_.initializers.end() ? nullptr : &it->second;
  }
  // The node that alone consumes `tensor`, when it is not a graph output; else nullptr.
  const Node* SoleConsumer(const std::string& tensor) const;
  void Skip(const Node* n) { skipped_.insert(n); }

  const Graph& g_;
  const ExecutorOptions& opt_;
  CudaExecutable& x_;
  Dt dt_;
  size_t es_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::vector<const Node*>> consumers_;
  std::set<const Node*> skipped_;
  std::vector<ArenaBuffer> buffers_;
  std::vector<Emitter> emitters_;
  void* arena_ = nullptr;
};

const Node* Compiler::SoleConsumer(const std::string& tensor) const {
  auto it = consumers_.find(tensor);
  if (it == consumers_.end() || it->second.size() != 1) return nullptr;
  if (tensor == g_.outputs[0].name) return nullptr;
  return it->second[0];
}

Result<Tensor*> Compiler::Act(const Node& n, const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    if (Init(name) != nullptr) {
      return Unsupported(n, "needs '" + name + "' to be computed, not a constant");
    }
    return InvalidArgument(Label(n) + ": input '" + name + "' is not produced before it");
  }
  Read(it->second);
  return &it->second;
}

Tensor& Compiler::Out(const std::string& name) {
  Tensor t;
  t.shape = shapes_.at(name);
  t.nhwc = t.shape.size() == 4;
  t.buffer = static_cast<int>(buffers_.size());
  ArenaBuffer b;
  b.bytes = (static_cast<size_t>(Elems(t.shape)) * es_ + kAlign - 1) / kAlign * kAlign;
  b.first = b.last = static_cast<int>(emitters_.size());
  buffers_.push_back(b);
  return tensors_[name] = t;
}

// Every step on the executor's stream, in stream order: the copy from the caller's pageable
// memory, then (fp16/bf16) the cast. A plain cudaMemcpy would run on the legacy default stream,
// which the executor's non-blocking stream does not wait for, and from pageable memory it may
// return before its DMA has reached the device: a kernel on stream_ could read half-written
// weights. The stream is synchronised before returning, so the host vector and the f32 staging
// buffer may go (after an error too: neither may be freed under a copy or cast still running).
Result<void*> Compiler::Upload(const std::vector<float>& values) {
  void* dst = nullptr;
  const size_t n = values.size();
  SHOAL_CUDA_TRY(cudaMalloc(&dst, std::max<size_t>(n, 1) * es_));
  x_.allocations_.push_back(dst);
  if (n == 0) return dst;
  cudaStream_t s = x_.stream_;
  if (dt_ == Dt::kF32) {
    SHOAL_CUDA_TRY(
        cudaMemcpyAsync(dst, values.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    SHOAL_CUDA_TRY(cudaStreamSynchronize(s));
    return dst;
  }
  float* tmp = nullptr;
  SHOAL_CUDA_TRY(cudaMalloc(&tmp, n * sizeof(float)));
  cudaError_t e = cudaMemcpyAsync(tmp, values.data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = CastF32(tmp, dst, dt_, static_cast<int64_t>(n), s);
  const cudaError_t sync = cudaStreamSynchronize(s);
  if (e == cudaSuccess) e = sync;
  cudaFree(tmp);
  if (e != cudaSuccess) return CudaStatus("uploading weights", e);
  return dst;
}

// Gemm and MatMul: Y[M,N] = A[M,K] W^T (+ bias) (ReLU), W stored [N,K] row-major. In cuBLASLt's
// column-major terms: Y^T (N x M) = op_T(W: K x N) * A^T (K x M), bias per row of Y^T.
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
  }
  return Unsupported(n, "does not run this operator");
}

Status Compiler::Build() {
  if (g_.inputs.size() != 1 || g_.outputs.size() != 1) {
    return InvalidArgument("the CUDA executor runs graphs with one input and one output (got " +
                           std::to_string(g_.inputs.size()) + " and " +
                           std::to_string(g_.outputs.size()) + ")");
  }
  if (opt_.max_batch < 1) return InvalidArgument("max_batch must be >= 1");
  auto shapes = g_.InferShapes(opt_.max_batch);
  if (!shapes.ok()) return shapes.status();
  shapes_ = std::move(*shapes);
  for (const Node& n : g_.nodes) {
    for (const std::string& in : n.inputs) {
      if (!in.empty()) consumers_[in].push_back(&n);
    }
  }
  for (const auto& [name, shape] : shapes_) {
    if (Init(name) != nullptr) continue;
    if (shape.empty() || shape[0] % opt_.max_batch != 0) {
      return InvalidArgument("tensor '" + name + "' " + ShapeToString(shape) +
                             " does not have the batch as its first dimension");
    }
  }
  x_.max_batch_ = opt_.max_batch;
  x_.device_ = opt_.device;
  const char* graphs = std::getenv("SHOAL_CUDA_GRAPHS");
  x_.use_graphs_ = !(graphs != nullptr && std::string(graphs) == "0");
  const char* fault = std::getenv("SHOAL_CUDA_GRAPH_CAPTURE_FAULT");
  x_.capture_fault_ = fault != nullptr && std::string(fault) == "1";
  SHOAL_CUDA_TRY(cudaSetDevice(opt_.device));
  SHOAL_CUDA_TRY(cudaStreamCreateWithFlags(&x_.stream_, cudaStreamNonBlocking));
  SHOAL_CUBLAS_TRY(cublasLtCreate(&x_.lt_));
#if defined(SHOAL_HAVE_CUDNN)
  SHOAL_CUDNN_TRY(cudnnCreate(&x_.dnn_));
  SHOAL_CUDNN_TRY(cudnnSetStream(x_.dnn_, x_.stream_));
#endif

  // The graph's input: f32 in the caller's layout -> the compute type (channels-last if 4-D).
  const std::string& in_name = g_.inputs[0].name;
  const Shape in_shape = shapes_.at(in_name);
  x_.in_shape_.assign(in_shape.begin() + 1, in_shape.end());
  x_.in_elems_ = Elems(x_.in_shape_);
  SHOAL_CUDA_TRY(cudaMalloc(&x_.d_in_, static_cast<size_t>(Elems(in_shape)) * sizeof(float)));
  x_.allocations_.push_back(x_.d_in_);
  {
    const Tensor* I = &Out(in_name);
    Emit([this, I](int64_t batch, std::vector<StepFn>& steps) {
      const float* in = x_.d_in_;
      void* y = Ptr(*I);
      const Dt dt = dt_;
      const bool nhwc = I->nhwc;
      const Shape sh = I->shape;
      const int64_t count = Count(*I, batch);
      steps.push_back([in, y, dt, nhwc, sh, count, batch](cudaStream_t s) -> Status {
        if (nhwc) {
          SHOAL_CUDA_TRY(NchwF32ToNhwc(in, y, dt, batch, sh[1], sh[2], sh[3], s));
        } else {
          SHOAL_CUDA_TRY(CastF32(in, y, dt, count, s));
        }
        return {};
      });
      return Status{};
    });
  }
  for (size_t i = 0; i < g_.nodes.size(); ++i) SHOAL_RETURN_IF_ERROR(Lower(i));

  // The graph's output: back to f32 in ONNX's layout.
  const std::string& out_name = g_.outputs[0].name;
  auto out_it = tensors_.find(out_name);
  if (out_it == tensors_.end()) {
    return InvalidArgument("graph output '" + out_name + "' is not computed by any node");
  }
  const Tensor* O = &out_it->second;
  Read(*O);
  x_.out_shape_.assign(O->shape.begin() + 1, O->shape.end());
  x_.out_elems_ = Elems(x_.out_shape_);
  SHOAL_CUDA_TRY(cudaMalloc(&x_.d_out_, static_cast<size_t>(Elems(O->shape)) * sizeof(float)));
  x_.allocations_.push_back(x_.d_out_);
  Emit([this, O](int64_t batch, std::vector<StepFn>& steps) {
    const void* x = Ptr(*O);
    float* out = x_.d_out_;
    const Dt dt = dt_;
    const bool nhwc = O->nhwc;
    const Shape sh = O->shape;
    const int64_t count = Count(*O, batch);
    steps.push_back([x, out, dt, nhwc, sh, count, batch](cudaStream_t s) -> Status {
      if (nhwc) {
        SHOAL_CUDA_TRY(NhwcToNchwF32(x, out, dt, batch, sh[1], sh[2], sh[3], s));
      } else {  // a cast: [1, count, 1, 1]
        SHOAL_CUDA_TRY(NhwcToNchwF32(x, out, dt, 1, count, 1, 1, s));
      }
      return {};
    });
    return Status{};
  });

  // The arena: biggest buffers first, each at the lowest offset free for its whole lifetime.
  std::vector<size_t> order(buffers_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers_[a].bytes > buffers_[b].bytes; });
  std::vector<size_t> placed;
  size_t arena_bytes = 0;
  for (size_t idx : order) {
    ArenaBuffer& b = buffers_[idx];
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of overlapping lifetimes
    for (size_t p : placed) {
      const ArenaBuffer& o = buffers_[p];
      if (o.first <= b.last && b.first <= o.last) busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + b.bytes <= lo) break;
      at = std::max(at, hi);
    }
    b.offset = at;
    arena_bytes = std::max(arena_bytes, at + b.bytes);
    placed.push_back(idx);
  }
  SHOAL_CUDA_TRY(cudaMalloc(&arena_, std::max<size_t>(arena_bytes, kAlign)));
  x_.allocations_.push_back(arena_);

  // One plan per bucket: 1, 2, 4, ... below max_batch, and max_batch.
  for (int64_t b = 1;; b *= 2) {
    const int64_t batch = std::min(b, opt_.max_batch);
    Bucket bucket;
    bucket.batch = batch;
    for (Emitter& e : emitters_) SHOAL_RETURN_IF_ERROR(e(batch, bucket.steps));
    x_.buckets_.push_back(std::move(bucket));
    if (batch == opt_.max_batch) break;
  }
  x_.workspace_bytes_ = std::max(x_.workspace_bytes_, kCublasWorkspace);
  SHOAL_CUDA_TRY(cudaMalloc(&x_.workspace_, x_.workspace_bytes_));
  x_.allocations_.push_back(x_.workspace_);
  // Last: the steps read the workspace pointer, and a capture records it.
  return x_.CaptureBuckets();
}

namespace {

class CudaExecutor final : public Executor {
 public:
  std::string_view name() const override { return "cuda"; }
  Result<std::unique_ptr<Executable>> Compile(const Graph& graph,
                                              const ExecutorOptions& options) override {
    Graph g = graph;
    SHOAL_RETURN_IF_ERROR(FoldBatchNorm(g));
    SHOAL_RETURN_IF_ERROR(g.Validate());
    std::unique_ptr<CudaExecutable> x(new CudaExecutable());
    Compiler c(g, options, *x);
    Status st = c.Build();
    if (!st.ok()) return st;
    return std::unique_ptr<Executable>(std::move(x));
  }
};

}  // namespace
}  // namespace cuda

namespace {

Result<std::unique_ptr<Executor>> CreateImpl() {
  const std::string problem = CudaDeviceProblem();
  if (!problem.empty()) return Unavailable(problem);
  return std::unique_ptr<Executor>(new cuda::CudaExecutor());
}

Status PinImpl(void* base, size_t bytes) {
  SHOAL_CUDA_TRY(cudaHostRegister(base, bytes, cudaHostRegisterPortable));
  return {};
}

Status UnpinImpl(void* base) {
  SHOAL_CUDA_TRY(cudaHostUnregister(base));
  return {};
}

const CudaModuleApi kApi{kCudaModuleApiVersion, &CreateImpl, &PinImpl, &UnpinImpl};

}  // namespace
}  // namespace shoal::inference

// The module's one exported symbol (everything else is hidden: see CMakeLists.txt).
extern "C" __attribute__((visibility("default"))) const shoal::inference::CudaModuleApi*
shoal_cuda_module_api() {
  return &shoal::inference::kApi;
}
