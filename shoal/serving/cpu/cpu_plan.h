// The CPU executor's plan for one batch size: oneDNN primitives in execution order with their
// arguments bound, every intermediate placed in one arena by lifetime (buffers whose lifetimes
// do not overlap share bytes), weights reordered once into the layouts the primitives chose.
// Built at Compile; Run only points the input at the caller's bytes and executes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference::cpu {

struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, dnnl::memory> args;  // owns the memories the step reads and writes
  // The same arguments as the C API takes them, built once: the C++ execute() would build
  // this vector (an allocation) on every call.
  std::vector<dnnl_exec_arg_t> c_args;
  // A plain C++ kernel (ops.h) instead of a primitive: reads and writes arena values.
  std::function<Status()> kernel;
};

// Weights converted to a primitive's layout, shared by every batch-size plan that wants the
// same (initializer, layout) pair.
class WeightCache {
 public:
  WeightCache(const dnnl::engine& engine, const Graph& graph) : engine_(engine), graph_(graph) {}
  // `src` describes the initializer's plain f32 values (its dims may differ from the stored
  // shape, e.g. a transposed or grouped view). `scale` multiplies every value (Gemm's alpha).
  dnnl::memory Get(const std::string& name, const dnnl::memory::desc& src,
                   const dnnl::memory::desc& want, float scale = 1.0f) {
    return Get(name, graph_.initializers.at(name), src, want, scale);
  }
  // The same for any constant (`key` names it uniquely: a folded tensor's key carries the
  // batch). INT64 constants are converted to float.
  dnnl::memory Get(const std::string& key, const Initializer& init, const dnnl::memory::desc& src,
                   const dnnl::memory::desc& want, float scale = 1.0f);
  const Graph& graph() const { return graph_; }

 private:
  struct Entry {
    std::string name;
    dnnl::memory::desc src, want;
    float scale;
    dnnl::memory mem;
  };
  dnnl::engine engine_;
  const Graph& graph_;
  std::vector<Entry> entries_;
  std::vector<std::vector<float>> scaled_;  // scaled copies, alive while reorders read them
};

// A buffer the plan uses: an arena slice (intermediates), or the caller's input.
struct Value {
  dnnl::memory mem;  // created without a handle; bound after the arena is laid out
  size_t bytes = 0;
  int first = 0, last = 0;  // steps that write it first and read it last
  int alias_of = -1;        // shares another value's bytes with a different shape (Flatten)
  bool external = false;    // the caller's input: not in the arena
  size_t offset = 0;
};

class Plan {
 public:
  int64_t batch = 0;
  std::vector<Step> steps;
  dnnl::memory input;   // f32, plain, [batch, ...]: its handle is set per Run
  dnnl::memory output;  // f32, plain, in the arena
  size_t arena_bytes = 0;
  size_t scratch_bytes = 0;
  std::vector<dnnl::memory> scratch_users;  // memories bound to the shared scratchpad

  // Binds every arena value and scratchpad to its bytes and builds each step's c_args.
  void Bind(uint8_t* arena, uint8_t* scratch);
  // Runs every step on `stream` and waits.
  Status Execute(const dnnl::stream& stream) const;

  std::vector<Value> values;
};

struct PlanOptions {
  dnnl::memory::data_type compute = dnnl::memory::data_type::f32;
};

// Lowers `graph` (validated; BatchNormalization may remain) for `batch` samples.
Result<std::unique_ptr<Plan>> BuildPlan(const Graph& graph, int64_t batch, const PlanOptions& o,
                                        const dnnl::engine& engine, WeightCache& weights);

}  // namespace shoal::inference::cpu
