// Each operator as oneDNN primitives. Layouts: convolutions and pools pick theirs (format_tag
// any; usually channel-blocked), reorders are inserted only where a consumer needs another
// (Lowering::Ensure); Gemm/MatMul/Softmax/Flatten work on plain row-major tensors.
#include <string>

#include "shoal/serving/cpu/cpu_lowering.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

// `sum`: the primitive adds its result to what its destination holds (before the ReLU).
dnnl::primitive_attr Attr(bool relu, bool sum = false) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (relu || sum) {
    dnnl::post_ops po;
    if (sum) po.append_sum(1.0f);
    if (relu) po.append_eltwise(algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  return attr;
}

Status NeedConstant(const Lowering& L, const Node& n, size_t i, const char* what) {
  if (i < n.inputs.size() && !n.inputs[i].empty() && !L.IsConstant(n.inputs[i])) {
    return InvalidArgument(NodeLabel(n) + ": " + what + " '" + n.inputs[i] +
                           "' must be an initializer (constant) for the CPU executor");
  }
  return {};
}

bool Has(const Node& n, size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); }

// Adds the step `pd` describes: its output is a new arena value (laid out as `pd` chose) bound to
// the node's first output; `args` are the step's inputs, `reads` the values it reads.
template <typename Primitive, typename PrimitiveDesc>
Status AddOutputStep(Lowering& L, const Node& n, const PrimitiveDesc& pd,
                     std::unordered_map<int, dnnl::memory> args, const std::vector<int>& reads) {
  const int dst = L.NewValue(pd.dst_desc());
  args[DNNL_ARG_DST] = L.Mem(dst);
  L.AddStep(Primitive(pd), std::move(args), reads, pd);
  L.Bind(n.outputs[0], dst);
  return {};
}

// `sum` (may be null): a tensor the conv's result is added to in place (Lowering::LowerNode).
Status LowerConv(Lowering& L, const Node& n, bool relu, const std::string* sum, bool* summed) {
  SHOAL_RETURN_IF_ERROR(NeedConstant(L, n, 1, "weights"));
  SHOAL_RETURN_IF_ERROR(NeedConstant(L, n, 2, "bias"));
  const auto& x = L.Shape(n.inputs[0]);
  const auto& w = L.Shape(n.inputs[1]);
  const auto& y = L.Shape(n.outputs[0]);
  auto win = ReadWindow(n, {w[2], w[3]});
  if (!win.ok()) return win.status();
  const int64_t g = win->group;
  const dims wdims = g == 1 ? dims{w[0], w[1], w[2], w[3]} : dims{g, w[0] / g, w[1], w[2], w[3]};
  const dnnl::memory::desc src_any(ToDims(x), L.compute(), tag::any);
  const dnnl::memory::desc w_any(wdims, L.compute(), tag::any);
  const dnnl::memory::desc b_md({w[0]}, dt::f32, tag::a);
  const dnnl::memory::desc dst_any(ToDims(y), L.compute(), tag::any);
  const dims strides{win->strides[0], win->strides[1]};
  const dims dil{win->dilations[0] - 1, win->dilations[1] - 1};  // oneDNN counts extra gaps
  const dims pl{win->pad_begin[0], win->pad_begin[1]}, pr{win->pad_end[0], win->pad_end[1]};
  const bool bias = Has(n, 2);
  auto make = [&](const dnnl::primitive_attr& attr) {
    return bias ? dnnl::convolution_forward::primitive_desc(
                      L.engine(), prop_kind::forward_inference, algorithm::convolution_direct,
                      src_any, w_any, b_md, dst_any, strides, dil, pl, pr, attr)
                : dnnl::convolution_forward::primitive_desc(
                      L.engine(), prop_kind::forward_inference, algorithm::convolution_direct,
                      src_any, w_any, dst_any, strides, dil, pl, pr, attr);
  };
  dnnl::convolution_forward::primitive_desc pd;
  *summed = false;
  if (sum != nullptr) {
    try {
      pd = make(Attr(relu, true));
      *summed = true;
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;  // no sum post-op here: the Add runs alone
    }
  }
  // Without the sum, `relu` (which follows the Add) is not the conv's: the Add fuses it.
  if (!*summed) {
    pd = make(Attr(relu && sum == nullptr));
  }
  const int src = L.Ensure(n.inputs[0], pd.src_desc());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, L.Mem(src)},
      {DNNL_ARG_WEIGHTS, L.Weights(n.inputs[1], {wdims, dt::f32, g == 1 ? tag::abcd : tag::abcde},
                                   pd.weights_desc())}};
  if (bias) args[DNNL_ARG_BIAS] = L.Weights(n.inputs[2], b_md, pd.bias_desc());
  if (!*summed) return AddOutputStep<dnnl::convolution_forward>(L, n, pd, std::move(args), {src});
  // The addend in the conv's destination layout, in the arena (a copy when it is the caller's
  // input or laid out otherwise); the conv reads it and writes its sum over it.
  const int acc = L.Ensure(*sum, pd.dst_desc(), true);
  args[DNNL_ARG_DST] = L.Mem(acc);
  L.AddStep(dnnl::convolution_forward(pd), std::move(args), {src, acc}, pd);
  L.Bind(n.outputs[0], acc);
  return {};
}

// Gemm (A runtime, B constant) and 2-D MatMul as one matmul primitive; alpha and beta are folded
// into the constant B and C when their layouts are converted.
Status LowerMatMul(Lowering& L, const Node& n, bool relu) {
  SHOAL_RETURN_IF_ERROR(NeedConstant(L, n, 1, "B"));
  const bool gemm = n.op == OpType::kGemm;
  if (gemm) SHOAL_RETURN_IF_ERROR(NeedConstant(L, n, 2, "C"));
  if (gemm && n.IntAttr("transA", 0) != 0) {
    return InvalidArgument(NodeLabel(n) + ": transA=1 would move the batch; not supported");
  }
  const auto& a = L.Shape(n.inputs[0]);
  const auto& y = L.Shape(n.outputs[0]);
  if (a.size() != 2)
    return InvalidArgument(NodeLabel(n) + ": the CPU executor supports 2-D A only");
  const bool tb = gemm && n.IntAttr("transB", 0) != 0;
  const int64_t k = a[1], cols = y[1];
  const dnnl::memory::desc src_md({a[0], k}, L.compute(), tag::ab);
  const dnnl::memory::desc w_any({k, cols}, L.compute(), tag::any);
  const dnnl::memory::desc dst_md({y[0], cols}, L.compute(), tag::ab);
  const dnnl::memory::desc b_md({1, cols}, dt::f32, tag::ab);
  const bool bias = gemm && Has(n, 2);
  if (bias) {
    const auto& c = L.Shape(n.inputs[2]);
    int64_t numel = 1;
    for (int64_t d : c) numel *= d;
    if (numel != cols || (c.size() == 2 && c[0] != 1)) {
      return InvalidArgument(NodeLabel(n) + ": C '" + n.inputs[2] +
                             "' must be a per-column bias ([" + std::to_string(cols) + "] or [1," +
                             std::to_string(cols) + "])");
    }
  }
  const dnnl::matmul::primitive_desc pd =
      bias ? dnnl::matmul::primitive_desc(L.engine(), src_md, w_any, b_md, dst_md, Attr(relu))
           : dnnl::matmul::primitive_desc(L.engine(), src_md, w_any, dst_md, Attr(relu));
  const int src = L.Ensure(n.inputs[0], pd.src_desc());
  // B as stored: [K,N] row-major, or [N,K] (transB) which is [K,N] column-major.
  const dnnl::memory::desc b_plain({k, cols}, dt::f32, tb ? tag::ba : tag::ab);
  const float alpha = gemm ? n.FloatAttr("alpha", 1.0f) : 1.0f;
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, L.Mem(src)},
      {DNNL_ARG_WEIGHTS, L.Weights(n.inputs[1], b_plain, pd.weights_desc(), alpha)}};
  if (bias) {
    args[DNNL_ARG_BIAS] = L.Weights(n.inputs[2], b_md, pd.bias_desc(), n.FloatAttr("beta", 1.0f));
  }
  return AddOutputStep<dnnl::matmul>(L, n, pd, std::move(args), {src});
}

Status LowerAdd(Lowering& L, const Node& n, bool relu) {
  std::string x = n.inputs[0], other = n.inputs[1];
  if (L.IsConstant(x)) std::swap(x, other);
  if (L.IsConstant(x)) return InvalidArgument(NodeLabel(n) + ": both inputs are constants");
  const auto& y = L.Shape(n.outputs[0]);
  if (L.Shape(x) != y) {
    return InvalidArgument(NodeLabel(n) + ": input '" + x + "' " + ShapeToString(L.Shape(x)) +
                           " would be broadcast to " + ShapeToString(y) +
                           "; only the second operand may broadcast");
  }
  const dnnl::memory::desc src0 = L.NativeDesc(x);
  const int a = L.Native(x);
  int b;
  dnnl::memory b_mem;
  if (L.IsConstant(other)) {
    std::vector<int64_t> bd(y.size(), 1);  // right-aligned numpy broadcast
    const auto& s = L.Shape(other);
    std::copy(s.begin(), s.end(), bd.end() - static_cast<ptrdiff_t>(s.size()));
    const dnnl::memory::desc plain(ToDims(bd), dt::f32, PlainTag(bd.size()));
    b_mem = L.Weights(other, plain, {ToDims(bd), L.compute(), PlainTag(bd.size())});
    b = -1;
  } else {
    b = L.Ensure(other, src0);
    b_mem = L.Mem(b);
  }
  dnnl::binary::primitive_desc pd(L.engine(), algorithm::binary_add, src0, b_mem.get_desc(), src0,
                                  Attr(relu));
  std::vector<int> reads{a};
  if (b >= 0) reads.push_back(b);
  return AddOutputStep<dnnl::binary>(L, n, pd,
                                     {{DNNL_ARG_SRC_0, L.Mem(a)}, {DNNL_ARG_SRC_1, b_mem}}, reads);
}

Status LowerRelu(Lowering& L, const Node& n) {
  const int src = L.Native(n.inputs[0]);
  const dnnl::memory::desc md = L.NativeDesc(n.inputs[0]);
  dnnl::eltwise_forward::primitive_desc pd(L.engine(), prop_kind::forward_inference,
                                           algorithm::eltwise_relu, md, md, 0.0f, 0.0f,
                                           Attr(false));
  return AddOutputStep<dnnl::eltwise_forward>(L, n, pd, {{DNNL_ARG_SRC, L.Mem(src)}}, {src});
}

Status LowerBatchNorm(Lowering& L, const Node& n) {
  for (size_t i = 1; i < 5; ++i) SHOAL_RETURN_IF_ERROR(NeedConstant(L, n, i, "parameter"));
  const int src = L.Native(n.inputs[0]);
  const int64_t c = L.Shape(n.inputs[0])[1];
  const dnnl::memory::desc p_md({c}, dt::f32, tag::a);
  const dnnl::memory::desc md = L.NativeDesc(n.inputs[0]);
  dnnl::batch_normalization_forward::primitive_desc pd(
      L.engine(), prop_kind::forward_inference, md, md, n.FloatAttr("epsilon", 1e-5f),
      dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
          dnnl::normalization_flags::use_shift,
      Attr(false));
  return AddOutputStep<dnnl::batch_normalization_forward>(
      L, n, pd,
      {{DNNL_ARG_SRC, L.Mem(src)},
       {DNNL_ARG_SCALE, L.Weights(n.inputs[1], p_md, p_md)},
       {DNNL_ARG_SHIFT, L.Weights(n.inputs[2], p_md, p_md)},
       {DNNL_ARG_MEAN, L.Weights(n.inputs[3], p_md, p_md)},
       {DNNL_ARG_VARIANCE, L.Weights(n.inputs[4], p_md, p_md)}},
      {src});
}

Status LowerPool(Lowering& L, const Node& n) {
  const auto& x = L.Shape(n.inputs[0]);
  const auto& y = L.Shape(n.outputs[0]);
  Window2d w;
  if (n.op == OpType::kGlobalAveragePool) {
    if (x.size() != 4) return InvalidArgument(NodeLabel(n) + ": the CPU executor needs [N,C,H,W]");
    w.kernel = {x[2], x[3]};
  } else {
    auto r = ReadWindow(n, {0, 0});
    if (!r.ok()) return r.status();
    w = *r;
  }
  algorithm alg = algorithm::pooling_max;
  if (n.op != OpType::kMaxPool) {
    alg = n.IntAttr("count_include_pad", 0) != 0 ? algorithm::pooling_avg_include_padding
                                                 : algorithm::pooling_avg_exclude_padding;
  }
  const int src = L.Native(n.inputs[0]);
  dnnl::pooling_forward::primitive_desc pd(
      L.engine(), prop_kind::forward_inference, alg, L.NativeDesc(n.inputs[0]),
      {ToDims(y), L.compute(), tag::any}, {w.strides[0], w.strides[1]}, {w.kernel[0], w.kernel[1]},
      {0, 0}, {w.pad_begin[0], w.pad_begin[1]}, {w.pad_end[0], w.pad_end[1]}, Attr(false));
  return AddOutputStep<dnnl::pooling_forward>(L, n, pd, {{DNNL_ARG_SRC, L.Mem(src)}}, {src});
}

// Flatten and Reshape move no data once the input is plain row-major: the output is the same
// bytes seen with other dimensions.
Status LowerReshape(Lowering& L, const Node& n) {
  const auto& x = L.Shape(n.inputs[0]);
  const auto& y = L.Shape(n.outputs[0]);
  const int plain = L.Ensure(n.inputs[0], {ToDims(x), L.compute(), PlainTag(x.size())}, true);
  L.Bind(n.outputs[0], L.AliasValue(plain, {ToDims(y), L.compute(), PlainTag(y.size())}));
  return {};
}

Status LowerSoftmax(Lowering& L, const Node& n) {
  const auto& x = L.Shape(n.inputs[0]);
  const int axis =
      static_cast<int>(NormaliseAxis(n.IntAttr("axis", -1), static_cast<int64_t>(x.size())));
  const dnnl::memory::desc md(ToDims(x), L.compute(), PlainTag(x.size()));
  const int src = L.Ensure(n.inputs[0], md);
  dnnl::softmax_forward::primitive_desc pd(L.engine(), prop_kind::forward_inference,
                                           algorithm::softmax_accurate, md, md, axis, Attr(false));
  return AddOutputStep<dnnl::softmax_forward>(L, n, pd, {{DNNL_ARG_SRC, L.Mem(src)}}, {src});
}

}  // namespace

Status Lowering::LowerNode(const Node& n, bool fuse_relu, const std::string* sum, bool* summed) {
  bool unused = false;
  if (summed == nullptr) summed = &unused;
  *summed = false;
  switch (n.op) {
    case OpType::kConv:
      return LowerConv(*this, n, fuse_relu, sum, summed);
    case OpType::kGemm:
      return LowerMatMul(*this, n, fuse_relu);
    case OpType::kMatMul:
      if (Shape(n.inputs[0]).size() == 2 && Shape(n.inputs[1]).size() == 2 &&
          IsConstant(n.inputs[1])) {
        return LowerMatMul(*this, n, fuse_relu);
      }
      break;
    case OpType::kAdd: {
      // The existing path when the runtime operand is full-size and the constant broadcasts.
      const bool c0 = IsConstant(n.inputs[0]), c1 = IsConstant(n.inputs[1]);
      const auto& y = Shape(n.outputs[0]);
      if ((c0 && Shape(n.inputs[1]) == y) || (c1 && Shape(n.inputs[0]) == y) ||
          (!c0 && !c1 && Shape(n.inputs[0]) == y && Shape(n.inputs[1]) == y)) {
        return LowerAdd(*this, n, fuse_relu);
      }
      break;
    }
    case OpType::kRelu:
      return LowerRelu(*this, n);
    case OpType::kBatchNormalization:
      return LowerBatchNorm(*this, n);
    case OpType::kMaxPool:
    case OpType::kAveragePool:
    case OpType::kGlobalAveragePool:
      return LowerPool(*this, n);
    case OpType::kFlatten:
      return LowerReshape(*this, n);
    case OpType::kSoftmax:
      return LowerSoftmax(*this, n);
    default:
      break;
  }
  bool handled = false;
  SHOAL_RETURN_IF_ERROR(LowerDnnlOp(*this, n, fuse_relu, &handled));
  if (handled) return {};
  if (fuse_relu) return Internal(NodeLabel(n) + ": a Relu cannot be fused here");
  return LowerPlain(*this, n);
}

}  // namespace shoal::inference::cpu
