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
#include "shoal/serving/cuda/cuda_executor_internal.h"

namespace shoal::inference {
namespace cuda {

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
