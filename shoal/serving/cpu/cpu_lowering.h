// Lowering state while one Plan is built: which value holds each tensor, in which layout, and
// the reorders inserted where a primitive wants another layout. cpu_plan.cc owns the driver and
// the arena; cpu_ops.cc turns each operator into primitives.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "shoal/serving/cpu/cpu_plan.h"
#include "shoal/serving/graph/fold_constants.h"

namespace shoal::inference::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

tag PlainTag(size_t rank);

class Lowering {
 public:
  Lowering(const Graph& g, const FoldedGraph& folded, const PlanOptions& o,
           const dnnl::engine& engine, WeightCache& weights, Plan& plan)
      : g_(g),
        folded_(folded),
        shapes_(folded.shapes),
        o_(o),
        engine_(engine),
        weights_(weights),
        plan_(plan) {}

  // Lowers one node; `fuse_relu` appends a ReLU post-op (the Relu node that follows is skipped).
  // `sum` (Conv only; may be null): a tensor already computed that the conv's result is added
  // to in place, before the ReLU (oneDNN's sum post-op): the conv writes into that tensor's
  // bytes, so the caller guarantees nothing reads it afterwards. `*summed` says whether it was
  // fused (false where oneDNN has no such kernel: the caller then lowers the Add itself).
  Status LowerNode(const Node& n, bool fuse_relu, const std::string* sum = nullptr,
                   bool* summed = nullptr);

  // The input value, registered before any node.
  void AddInput(const std::string& name);
  // Makes `tensor` available as f32 plain in the arena and returns its value.
  int FinishOutput(const std::string& tensor);

  // The value of `tensor` in layout `want`, reordering (once per layout) when it differs.
  // `in_arena`: never hand back the caller's input buffer (aliases must live in the arena).
  int Ensure(const std::string& tensor, const dnnl::memory::desc& want, bool in_arena = false);
  // A new arena value written by the step about to be added.
  int NewValue(const dnnl::memory::desc& md);
  int AliasValue(int parent, const dnnl::memory::desc& md);
  // Appends a step; every value in `reads` is read by it (their lifetimes extend to it).
  void AddStep(const dnnl::primitive& p, std::unordered_map<int, dnnl::memory> args,
               const std::vector<int>& reads, const dnnl::primitive_desc_base& pd);
  // A constant (the graph's initializer or a folded tensor) converted to `want`.
  dnnl::memory Weights(const std::string& name, const dnnl::memory::desc& src,
                       const dnnl::memory::desc& want, float scale = 1.0f) {
    auto it = folded_.constants.find(name);
    if (it == folded_.constants.end()) return weights_.Get(name, src, want, scale);
    return weights_.Get(name + "@batch" + std::to_string(folded_.batch), it->second, src, want,
                        scale);
  }
  const Initializer& Constant(const std::string& t) const {
    auto it = folded_.constants.find(t);
    return it != folded_.constants.end() ? it->second : g_.initializers.at(t);
  }
  // Adds a plain C++ step (a kernel of ops.h) reading the values `reads`.
  void AddKernelStep(std::function<Status()> kernel, const std::vector<int>& reads);
  void Bind(const std::string& tensor, int value) { native_[tensor] = value; }
  bool Computed(const std::string& tensor) const { return native_.count(tensor) != 0; }
  int Native(const std::string& tensor) const { return native_.at(tensor); }

  const Graph& graph() const { return g_; }
  const std::vector<int64_t>& Shape(const std::string& t) const { return shapes_.at(t); }
  dt compute() const { return o_.compute; }
  const dnnl::engine& engine() const { return engine_; }
  dnnl::memory::desc NativeDesc(const std::string& t) const {
    return plan_.values[static_cast<size_t>(native_.at(t))].mem.get_desc();
  }
  dnnl::memory Mem(int v) const { return plan_.values[static_cast<size_t>(v)].mem; }
  bool IsAlias(int v) const { return plan_.values[static_cast<size_t>(v)].alias_of >= 0; }
  bool IsConstant(const std::string& t) const {
    return g_.initializers.count(t) != 0 || folded_.constants.count(t) != 0;
  }

 private:
  const Graph& g_;
  const FoldedGraph& folded_;
  const std::map<std::string, std::vector<int64_t>>& shapes_;
  const PlanOptions& o_;
  const dnnl::engine& engine_;
  WeightCache& weights_;
  Plan& plan_;
  std::map<std::string, int> native_;  // tensor -> the value its producer wrote
  struct Converted {
    int from;
    dnnl::memory::desc md;
    int value;
  };
  std::vector<Converted> converted_;
};

dims ToDims(const std::vector<int64_t>& v);

// The operator families beyond cpu_ops.cc: oneDNN eltwise, binary, layer normalization and
// batched matmul (cpu_ops_dnnl.cc); every other operator through its plain kernel
// (cpu_ops_plain.cc).
Status LowerDnnlOp(Lowering& L, const Node& n, bool fuse_relu, bool* handled);

// What fuses into a MatMul with constant 2-D weights (cpu_fusion.cc): its bias Add and an erf
// GELU after it. `fused` are the nodes the matmul step replaces; `output` the tensor it writes.
struct MatMulFusion {
  std::string bias;  // "" when none
  bool gelu = false;
  std::vector<const Node*> fused;
  std::string output;
};
MatMulFusion FindMatMulFusion(const std::vector<Node>& nodes, const Graph& g, const Lowering& L,
                              const Node& mm);
// GPT-2's tanh GELU (eight nodes) read from `first`'s input x, when `first` is the first of them
// in order (Mul(x, 0.5) or Pow(x, 3)): run as one gelu_tanh eltwise (LowerGeluTanh).
MatMulFusion FindGeluTanh(const std::vector<Node>& nodes, const Graph& g, const Lowering& L,
                          const Node& first);
Status LowerGeluTanh(Lowering& L, const std::string& x, const std::string& output);
// A MatMul of any rank (cpu_ops_dnnl.cc); with `fusion` (constant 2-D weights only) the bias
// and GELU run in the primitive and fusion->output is bound to its result.
Status LowerMatMulNd(Lowering& L, const Node& n, bool relu, const MatMulFusion* fusion);
Status LowerPlain(Lowering& L, const Node& n);

}  // namespace shoal::inference::cpu
