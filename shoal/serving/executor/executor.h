// Executors run a validated Graph on one device. Two implementations behind this interface:
// CPU (oneDNN; always built and tested) and CUDA (cuBLAS/cuBLASLt + cuDNN, one CUDA graph per
// batch-size bucket; built when the CUDA Toolkit is found, run where a GPU is present).
//
// Hot swap: Compile() turns a graph (with its weights) into an Executable; a new model version
// is compiled beside the running one and the caller switches between batches. An Executable is
// immutable once compiled and may be shared by threads, but Run() calls are serialised by the
// caller (one batch at a time per Executable).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "shoal/common/status.h"
#include "shoal/serving/graph/graph.h"

namespace shoal::inference {

enum class Precision : uint8_t { kF32, kF16, kBF16 };
std::string_view PrecisionName(Precision p);  // "fp32", "fp16", "bf16"

struct ExecutorOptions {
  Precision precision = Precision::kF32;  // compute precision; inputs/outputs stay float32
  int64_t max_batch = 64;                 // largest batch Run() accepts
  int threads = 0;                        // CPU: 0 = all cores
  int device = 0;                         // CUDA device ordinal
};

// One batch: the graph's single input, float32, row-major, `batch` samples of the input's
// per-sample shape; `output` receives the graph's single output the same way.
struct BatchIO {
  std::span<const float> input;
  std::span<float> output;
  int64_t batch = 0;
};

// How an Executable runs a batch. The CUDA executor replays one CUDA graph per batch-size bucket,
// captured once when it compiles; a bucket whose capture failed (or every bucket, with
// SHOAL_CUDA_GRAPHS=0) launches its kernels one by one instead, and says why. The CPU executor
// has no buckets: all zero.
struct ExecutionMode {
  int graph_buckets = 0;     // buckets replayed as a captured CUDA graph
  int eager_buckets = 0;     // buckets launched kernel by kernel
  std::string eager_reason;  // why (the first eager bucket's reason); "" when none is eager
};

class Executable {
 public:
  virtual ~Executable() = default;
  virtual ExecutionMode execution_mode() const { return {}; }
  // kInvalidArgument when batch is 0 or above max_batch, or a span has the wrong size.
  virtual Status Run(const BatchIO& io) = 0;
  // Per-sample shapes (batch dimension removed) of the graph's input and output.
  virtual const std::vector<int64_t>& input_shape() const = 0;
  virtual const std::vector<int64_t>& output_shape() const = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;  // "cpu" or "cuda"
  // The graph must have passed Validate() and have exactly one input and one output.
  virtual Result<std::unique_ptr<Executable>> Compile(const Graph& graph,
                                                      const ExecutorOptions& options) = 0;
};

// "cpu", "cuda" or "auto" (CUDA when built in and a device is present, else CPU). "cuda" gives
// kUnavailable with the reason when no GPU or no CUDA build. Library shoal_inference; the CUDA
// build provides `Result<std::unique_ptr<Executor>> CreateCudaExecutor()` (shoal/serving/cuda),
// which must be cheap and say why when no device is visible: CudaAvailable() calls it.
Result<std::unique_ptr<Executor>> CreateExecutor(std::string_view kind);
// Whether this build has the CUDA executor and a GPU is visible; `reason` says why not.
bool CudaAvailable(std::string* reason = nullptr);

}  // namespace shoal::inference
