// The CUDA executor's inside, shared by its two files: cuda_executor.cc (the executable, the
// compiler's plan and arena, the executor and the module entry points) and cuda_lowering.cc
// (each ONNX op lowered to cuBLASLt, cuDNN or a kernel of ours). Private to the CUDA module.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "shoal/serving/cuda/cuda_module_api.h"
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

#include "shoal/common/cuda_status.h"
#include "shoal/serving/cuda/cuda_kernels.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference::cuda {
namespace detail {

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

inline constexpr size_t kAlign = 256;
inline constexpr size_t kCublasWorkspace = size_t{32} << 20;
inline constexpr size_t kMaxConvWorkspace = size_t{1} << 30;

inline int64_t Elems(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

inline std::string Label(const Node& n) {
  return "node '" + n.name + "' (" + std::string(OpTypeName(n.op)) + ")";
}
inline Status Unsupported(const Node& n, const std::string& what) {
  return InvalidArgument(Label(n) + ": the CUDA executor " + what);
}

inline Dt DtOf(Precision p) {
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
inline cudaDataType_t BlasType(Dt t) {
  return t == Dt::kF32 ? CUDA_R_32F : (t == Dt::kF16 ? CUDA_R_16F : CUDA_R_16BF);
}
#if defined(SHOAL_HAVE_CUDNN)
inline cudnnDataType_t DnnType(Dt t) {
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

}  // namespace detail
using namespace detail;  // NOLINT(google-build-using-namespace): this module's own

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

}  // namespace shoal::inference::cuda
