// Every operator with a plain C++ kernel (shoal/serving/graph/ops.h) as a plan step on plain
// row-major float32 values: data movement (Gather, Concat, Slice, Split, Transpose, Expand,
// Pad), comparisons, Where, Cast, ReduceMean and the element-wise math oneDNN has no primitive
// for (Erf, broadcasts of the first operand). Reshape, Squeeze, Unsqueeze, Identity and Dropout
// move no data.
#include <memory>
#include <string>

#include "shoal/serving/cpu/cpu_lowering.h"
#include "shoal/serving/graph/ops.h"

namespace shoal::inference::cpu {
namespace {

dnnl::memory::desc PlainF32(const std::vector<int64_t>& s) {
  if (s.empty()) return {{1}, dt::f32, tag::a};
  return {ToDims(s), dt::f32, PlainTag(s.size())};
}

struct KernelState {
  Node node;
  std::vector<ops::Shape> in_shapes;
  std::vector<std::vector<int64_t>> ints;
  std::vector<bool> has_ints;
  std::vector<dnnl::memory> in;  // empty memory for an omitted input
  std::vector<dnnl::memory> out;
  bool int_math = false;

  Status Run() const {
    ops::Io<float> io;
    io.in_shapes = in_shapes;
    io.int_math = int_math;
    for (size_t i = 0; i < in.size(); ++i) {
      io.in_ints.push_back(has_ints[i] ? &ints[i] : nullptr);
      io.in.push_back(in[i] ? static_cast<const float*>(in[i].get_data_handle()) : nullptr);
    }
    for (const dnnl::memory& m : out) io.out.push_back(static_cast<float*>(m.get_data_handle()));
    return ops::Eval(node, io);
  }
};

}  // namespace

Status LowerPlain(Lowering& L, const Node& n) {
  const std::string label = NodeLabel(n);
  if (!ops::HasKernel(n.op))
    return InvalidArgument("unsupported operator: " + label + " has no CPU lowering");
  if (n.op == OpType::kIdentity || n.op == OpType::kDropout) {
    if (L.IsConstant(n.inputs[0])) return Internal(label + ": constant input was not folded");
    L.Bind(n.outputs[0], L.Native(n.inputs[0]));
    return {};
  }
  if ((n.op == OpType::kReshape || n.op == OpType::kSqueeze || n.op == OpType::kUnsqueeze) &&
      !L.IsConstant(n.inputs[0])) {
    const auto& x = L.Shape(n.inputs[0]);
    const int plain = L.Ensure(n.inputs[0], {ToDims(x), L.compute(), PlainTag(x.size())}, true);
    const auto& y = L.Shape(n.outputs[0]);
    L.Bind(n.outputs[0], L.AliasValue(plain, {ToDims(y), L.compute(), PlainTag(y.size())}));
    return {};
  }
  auto st = std::make_shared<KernelState>();
  st->node = n;
  std::vector<int> reads;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const std::string& t = n.inputs[i];
    st->has_ints.push_back(false);
    st->ints.emplace_back();
    if (t.empty()) {
      st->in_shapes.emplace_back();
      st->in.emplace_back();
      continue;
    }
    const auto& s = L.Shape(t);
    st->in_shapes.push_back(s);
    if (L.IsConstant(t)) {
      const Initializer& init = L.Constant(t);
      if (init.is_int()) {
        st->ints.back() = init.ints;
        st->has_ints.back() = true;
        if (i == 0) st->int_math = true;
      } else if (init.floats.size() <= 64) {
        for (float v : init.floats) st->ints.back().push_back(static_cast<int64_t>(v));
        st->has_ints.back() = true;
      }
      st->in.push_back(L.Weights(t, PlainF32(s), PlainF32(s)));
      continue;
    }
    const int v = L.Ensure(t, PlainF32(s));
    reads.push_back(v);
    st->in.push_back(L.Mem(v));
  }
  // The shapes the kernel computes must be the ones the plan was laid out for.
  ops::Io<float> io;
  io.in_shapes = st->in_shapes;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    io.in_ints.push_back(st->has_ints[i] ? &st->ints[i] : nullptr);
  }
  SHOAL_RETURN_IF_ERROR(ops::Eval(n, io));
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (io.out_shapes.at(i) != L.Shape(n.outputs[i])) {
      return Internal(label + ": output shape " + ShapeToString(io.out_shapes[i]) +
                      " differs from the inferred " + ShapeToString(L.Shape(n.outputs[i])));
    }
    // Written by the step added next (NewValue dates a value from the next step).
    const int v = L.NewValue(PlainF32(io.out_shapes[i]));
    st->out.push_back(L.Mem(v));
    L.Bind(n.outputs[i], v);
  }
  L.AddKernelStep([st] { return st->Run(); }, reads);
  return {};
}

}  // namespace shoal::inference::cpu
