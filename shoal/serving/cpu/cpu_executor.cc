#include "shoal/serving/cpu/cpu_executor.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "shoal/serving/cpu/cpu_plan.h"

namespace shoal::inference {
namespace {

using cpu::Plan;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

AlignedBytes AllocZeroed(size_t bytes) {
  const size_t n = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, n));
  if (p != nullptr) std::memset(p, 0, n);
  return AlignedBytes(p);
}

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(const dnnl::engine& engine, const ExecutorOptions& o)
      : engine_(engine), stream_(engine), options_(o) {}

  Status Init(const Graph& graph) {
    auto shapes = graph.InferShapes(1);
    if (!shapes.ok()) return shapes.status();
    input_shape_ = shapes->at(graph.inputs[0].name);
    output_shape_ = shapes->at(graph.outputs[0].name);
    input_shape_.erase(input_shape_.begin());
    output_shape_.erase(output_shape_.begin());
    in_numel_ = Numel(input_shape_);
    out_numel_ = Numel(output_shape_);

    cpu::PlanOptions po;
    switch (options_.precision) {
      case Precision::kF32:
        po.compute = dnnl::memory::data_type::f32;
        break;
      case Precision::kBF16:
        po.compute = dnnl::memory::data_type::bf16;
        break;
      case Precision::kF16:
        po.compute = dnnl::memory::data_type::f16;
        break;
    }
    cpu::WeightCache weights(engine_, graph);
    // One plan per power-of-two batch up to max_batch: a batch of 3 runs the plan for 4 (one
    // padded sample) instead of the plan for max_batch.
    std::vector<int64_t> buckets;
    for (int64_t b = 1; b < options_.max_batch; b *= 2) buckets.push_back(b);
    buckets.push_back(options_.max_batch);
    size_t arena = 0, scratch = 0;
    for (int64_t b : buckets) {
      auto plan = cpu::BuildPlan(graph, b, po, engine_, weights);
      if (!plan.ok()) return plan.status();
      arena = std::max(arena, (*plan)->arena_bytes);
      scratch = std::max(scratch, (*plan)->scratch_bytes);
      plans_.push_back(std::move(*plan));
    }
    arena_ = AllocZeroed(arena);
    scratch_ = AllocZeroed(scratch);
    staging_ = AllocZeroed(static_cast<size_t>(options_.max_batch * in_numel_) * sizeof(float));
    if (!arena_ || !scratch_ || !staging_) {
      return ResourceExhausted("CPU executor: cannot allocate " + std::to_string(arena) +
                               " bytes for intermediates");
    }
    for (auto& p : plans_) p->Bind(arena_.get(), scratch_.get());
    return {};
  }

  Status Run(const BatchIO& io) override {
    if (io.batch < 1 || io.batch > options_.max_batch) {
      return InvalidArgument("batch " + std::to_string(io.batch) + " is outside 1.." +
                             std::to_string(options_.max_batch) + " (max_batch)");
    }
    const auto in_n = static_cast<size_t>(io.batch * in_numel_);
    const auto out_n = static_cast<size_t>(io.batch * out_numel_);
    if (io.input.size() != in_n) {
      return InvalidArgument("input has " + std::to_string(io.input.size()) + " floats; batch " +
                             std::to_string(io.batch) + " of " + ShapeToString(input_shape_) +
                             " needs " + std::to_string(in_n));
    }
    if (io.output.size() != out_n) {
      return InvalidArgument("output has room for " + std::to_string(io.output.size()) +
                             " floats; batch " + std::to_string(io.batch) + " of " +
                             ShapeToString(output_shape_) + " needs " + std::to_string(out_n));
    }
    const Plan& plan = **std::find_if(plans_.begin(), plans_.end(),
                                      [&](const auto& p) { return p->batch >= io.batch; });
    if (plan.batch == io.batch) {
      plan.input.set_data_handle(const_cast<float*>(io.input.data()));  // read only
    } else {
      std::memcpy(staging_.get(), io.input.data(), in_n * sizeof(float));
      plan.input.set_data_handle(staging_.get());
    }
    // OpenMP's thread count is per calling thread: set it on the thread that runs.
    if (options_.threads > 0) omp_set_num_threads(options_.threads);
    SHOAL_RETURN_IF_ERROR(plan.Execute(stream_));
    std::memcpy(io.output.data(), plan.output.get_data_handle(), out_n * sizeof(float));
    return {};
  }

  const std::vector<int64_t>& input_shape() const override { return input_shape_; }
  const std::vector<int64_t>& output_shape() const override { return output_shape_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  ExecutorOptions options_;
  std::vector<int64_t> input_shape_, output_shape_;
  int64_t in_numel_ = 0, out_numel_ = 0;
  std::vector<std::unique_ptr<Plan>> plans_;
  AlignedBytes arena_, scratch_, staging_;
};

class CpuExecutor final : public Executor {
 public:
  CpuExecutor() : engine_(dnnl::engine::kind::cpu, 0) {}
  std::string_view name() const override { return "cpu"; }

  Result<std::unique_ptr<Executable>> Compile(const Graph& graph,
                                              const ExecutorOptions& options) override {
    if (graph.inputs.size() != 1 || graph.outputs.size() != 1) {
      return InvalidArgument("graph '" + graph.name + "' has " +
                             std::to_string(graph.inputs.size()) + " inputs and " +
                             std::to_string(graph.outputs.size()) +
                             " outputs; executors run graphs with exactly one of each");
    }
    if (options.max_batch < 1) return InvalidArgument("max_batch must be >= 1");
    if (options.threads > 0) omp_set_num_threads(options.threads);
    auto exe = std::make_unique<CpuExecutable>(engine_, options);
    try {
      SHOAL_RETURN_IF_ERROR(exe->Init(graph));
    } catch (const dnnl::error& e) {
      return Internal(std::string("CPU executor: oneDNN: ") + e.what());
    }
    return std::unique_ptr<Executable>(std::move(exe));
  }

 private:
  dnnl::engine engine_;
};

}  // namespace

Result<std::unique_ptr<Executor>> CreateCpuExecutor() {
  try {
    return std::unique_ptr<Executor>(std::make_unique<CpuExecutor>());
  } catch (const dnnl::error& e) {
    return Unavailable(std::string("CPU executor: oneDNN engine: ") + e.what());
  }
}

}  // namespace shoal::inference
