// The operator families oneDNN has primitives for, beyond cpu_ops.cc: eltwise (Sigmoid, Tanh,
// HardSwish, HardSigmoid, Sqrt, Exp, Neg, Clip, Pow by a constant scalar), broadcasting binary
// Add/Sub/Mul/Div (the first operand full-size, in its producer's layout), LayerNormalization
// over the trailing dimensions, and MatMul of any rank (constant 2-D weights, or two runtime
// operands with broadcast batch dimensions, as attention's QK^T and PV are).
#include <numeric>
#include <string>

#include "shoal/serving/cpu/cpu_lowering.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

dnnl::primitive_attr Attr(bool relu) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  return attr;
}

int64_t Prod(const std::vector<int64_t>& s, size_t b, size_t e) {
  return std::accumulate(s.begin() + static_cast<ptrdiff_t>(b),
                         s.begin() + static_cast<ptrdiff_t>(e), int64_t{1}, std::multiplies<>());
}

dnnl::memory::desc Plain(const std::vector<int64_t>& s, dt t) {
  return {ToDims(s), t, PlainTag(s.size())};
}

// `tensor` as plain row-major in the arena, seen with `shape` (same element count).
int PlainAs(Lowering& L, const std::string& tensor, const std::vector<int64_t>& shape) {
  const auto& s = L.Shape(tensor);
  const int v = L.Ensure(tensor, Plain(s, L.compute()), s != shape);
  if (s == shape) return v;
  return L.AliasValue(v, Plain(shape, L.compute()));
}

// A scalar constant's value, if `t` is one.
bool ScalarConstant(const Lowering& L, const std::string& t, float* v) {
  if (!L.IsConstant(t)) return false;
  const Initializer& init = L.Constant(t);
  if (init.is_int() ? init.ints.size() != 1 : init.floats.size() != 1) return false;
  *v = init.is_int() ? static_cast<float>(init.ints[0]) : init.floats[0];
  return true;
}

Status Eltwise(Lowering& L, const Node& n, algorithm alg, float alpha, float beta,
               const dnnl::post_ops* po = nullptr) {
  const int src = L.Native(n.inputs[0]);
  const dnnl::memory::desc md = L.NativeDesc(n.inputs[0]);
  dnnl::primitive_attr attr = Attr(false);
  if (po != nullptr) attr.set_post_ops(*po);
  dnnl::eltwise_forward::primitive_desc pd(L.engine(), prop_kind::forward_inference, alg, md, md,
                                           alpha, beta, attr);
  const int dst = L.NewValue(pd.dst_desc());
  L.AddStep(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, L.Mem(src)}, {DNNL_ARG_DST, L.Mem(dst)}},
            {src}, pd);
  L.Bind(n.outputs[0], dst);
  return {};
}

// Binary with oneDNN: `x` full-size (its producer's layout), `other` broadcast into it.
Status Binary(Lowering& L, const Node& n, algorithm alg, const std::string& x,
              const std::string& other, bool relu, bool* handled) {
  const auto& y = L.Shape(n.outputs[0]);
  if (L.IsConstant(x) || L.Shape(x) != y || y.empty()) return {};
  const auto& os = L.Shape(other);
  if (os.size() > y.size()) return {};
  std::vector<int64_t> bd(y.size() - os.size(), 1);
  bd.insert(bd.end(), os.begin(), os.end());
  const bool same = bd == y;
  dnnl::memory::desc src0 = L.NativeDesc(x);
  int a = L.Native(x);
  int b = -1;
  dnnl::memory b_mem;
  if (L.IsConstant(other)) {
    b_mem = L.Weights(other, Plain(bd, dt::f32), Plain(bd, L.compute()));
  } else {
    b = same ? L.Ensure(other, src0) : PlainAs(L, other, bd);
    b_mem = L.Mem(b);
  }
  // A broadcast over a blocked (convolution's) layout, as a squeeze-excitation's channel scale
  // is, stays in that layout where oneDNN has an optimised kernel for it; else both go plain.
  auto make = [&] {
    return dnnl::binary::primitive_desc(L.engine(), alg, src0, b_mem.get_desc(), src0, Attr(relu));
  };
  dnnl::binary::primitive_desc pd;
  bool native = same || src0 == Plain(y, L.compute());
  if (!native) {
    // First with the other operand in its own producer's layout (a channel-blocked [N,C,1,1]
    // after a convolution), then plain.
    const bool own = b >= 0 && L.NativeDesc(other).get_dims() == ToDims(bd);
    for (int attempt = own ? 0 : 1; attempt < 2 && !native; ++attempt) {
      const int cand = attempt == 0 ? L.Native(other) : b;
      const dnnl::memory cand_mem = b >= 0 ? L.Mem(cand) : b_mem;
      try {
        pd = dnnl::binary::primitive_desc(L.engine(), alg, src0, cand_mem.get_desc(), src0,
                                          Attr(relu));
        native = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
      } catch (const dnnl::error&) {
        native = false;
      }
      if (native && b >= 0) {
        b = cand;
        b_mem = cand_mem;
      }
    }
  }
  if (!native) {
    a = L.Ensure(x, Plain(y, L.compute()));
    src0 = Plain(y, L.compute());
  }
  if (!native || same || src0 == Plain(y, L.compute())) pd = make();
  std::vector<int> reads{a};
  if (b >= 0) reads.push_back(b);
  const int dst = L.NewValue(pd.dst_desc());
  L.AddStep(dnnl::binary(pd),
            {{DNNL_ARG_SRC_0, L.Mem(a)}, {DNNL_ARG_SRC_1, b_mem}, {DNNL_ARG_DST, L.Mem(dst)}},
            reads, pd);
  L.Bind(n.outputs[0], dst);
  *handled = true;
  return {};
}

Status LayerNorm(Lowering& L, const Node& n) {
  const auto& x = L.Shape(n.inputs[0]);
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", -1), static_cast<int64_t>(x.size()));
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (!n.inputs[i].empty() && !L.IsConstant(n.inputs[i])) {
      return InvalidArgument(NodeLabel(n) + ": scale and bias must be constants");
    }
  }
  const int64_t rows = Prod(x, 0, static_cast<size_t>(axis));
  const int64_t cols = Prod(x, static_cast<size_t>(axis), x.size());
  const std::vector<int64_t> flat{rows, cols};
  const int src = PlainAs(L, n.inputs[0], flat);
  auto flags = dnnl::normalization_flags::use_scale;
  const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (bias) flags = flags | dnnl::normalization_flags::use_shift;
  const dnnl::memory::desc md = Plain(flat, L.compute());
  dnnl::layer_normalization_forward::primitive_desc pd(L.engine(), prop_kind::forward_inference, md,
                                                       md, n.FloatAttr("epsilon", 1e-5f), flags,
                                                       Attr(false));
  const dnnl::memory::desc p_md({cols}, dt::f32, tag::a);
  const int dst = L.NewValue(md);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, L.Mem(src)},
                                             {DNNL_ARG_DST, L.Mem(dst)},
                                             {DNNL_ARG_SCALE, L.Weights(n.inputs[1], p_md, p_md)}};
  if (bias) args[DNNL_ARG_SHIFT] = L.Weights(n.inputs[2], p_md, p_md);
  L.AddStep(dnnl::layer_normalization_forward(pd), std::move(args), {src}, pd);
  L.Bind(n.outputs[0], L.AliasValue(dst, Plain(x, L.compute())));
  return {};
}

// MatMul beyond cpu_ops.cc's 2-D case. Constant 2-D B: A's leading dimensions fold into M.
// Otherwise both operands are padded to the output's rank and multiplied batch by batch.
Status MatMulNd(Lowering& L, const Node& n, bool relu, const MatMulFusion* fusion) {
  const auto& a = L.Shape(n.inputs[0]);
  const auto& b = L.Shape(n.inputs[1]);
  const auto& y = L.Shape(n.outputs[0]);
  const int64_t k = a.back(), cols = y.back();
  const bool b_const = L.IsConstant(n.inputs[1]);
  if (b_const && b.size() == 2) {
    const int64_t m = Prod(a, 0, a.size() - 1);
    const int src = PlainAs(L, n.inputs[0], {m, k});
    const dnnl::memory::desc src_md({m, k}, L.compute(), tag::ab);
    if (fusion != nullptr && fusion->bias.empty() && !fusion->gelu) fusion = nullptr;
    const dnnl::memory::desc dst_md({m, cols}, L.compute(), tag::ab);
    const dnnl::memory::desc w_any({k, cols}, L.compute(), tag::any);
    const dnnl::memory::desc b_md({1, cols}, dt::f32, tag::ab);
    const bool bias = fusion != nullptr && !fusion->bias.empty();
    dnnl::primitive_attr attr = Attr(relu);
    if (fusion != nullptr && fusion->gelu) {
      dnnl::post_ops po;
      po.append_eltwise(algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd =
        bias ? dnnl::matmul::primitive_desc(L.engine(), src_md, w_any, b_md, dst_md, attr)
             : dnnl::matmul::primitive_desc(L.engine(), src_md, w_any, dst_md, attr);
    const int dst = L.NewValue(dst_md);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, L.Mem(src)},
        {DNNL_ARG_WEIGHTS,
         L.Weights(n.inputs[1], {{k, cols}, dt::f32, tag::ab}, pd.weights_desc())},
        {DNNL_ARG_DST, L.Mem(dst)}};
    if (bias) args[DNNL_ARG_BIAS] = L.Weights(fusion->bias, b_md, pd.bias_desc());
    L.AddStep(dnnl::matmul(pd), std::move(args), {src}, pd);
    const int out = L.AliasValue(dst, Plain(y, L.compute()));
    L.Bind(n.outputs[0], out);
    if (fusion != nullptr) L.Bind(fusion->output, out);
    return {};
  }
  auto padded = [&](const std::vector<int64_t>& s) {
    std::vector<int64_t> p(y.size() - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const auto pa = padded(a), pb = padded(b);
  const int src = PlainAs(L, n.inputs[0], pa);
  dnnl::memory w_mem;
  int w = -1;
  if (b_const) {
    w_mem = L.Weights(n.inputs[1], Plain(pb, dt::f32), Plain(pb, L.compute()));
  } else {
    w = PlainAs(L, n.inputs[1], pb);
    w_mem = L.Mem(w);
  }
  const dnnl::memory::desc dst_md = Plain(y, L.compute());
  dnnl::matmul::primitive_desc pd(L.engine(), Plain(pa, L.compute()), w_mem.get_desc(), dst_md,
                                  Attr(relu));
  const int dst = L.NewValue(dst_md);
  std::vector<int> reads{src};
  if (w >= 0) reads.push_back(w);
  L.AddStep(dnnl::matmul(pd),
            {{DNNL_ARG_SRC, L.Mem(src)}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, L.Mem(dst)}},
            reads, pd);
  L.Bind(n.outputs[0], dst);
  (void)k;
  return {};
}

}  // namespace

Status LowerGeluTanh(Lowering& L, const std::string& x, const std::string& output) {
  const int src = L.Native(x);
  const dnnl::memory::desc md = L.NativeDesc(x);
  dnnl::eltwise_forward::primitive_desc pd(L.engine(), prop_kind::forward_inference,
                                           algorithm::eltwise_gelu_tanh, md, md, 0.0f, 0.0f,
                                           Attr(false));
  const int dst = L.NewValue(pd.dst_desc());
  L.AddStep(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, L.Mem(src)}, {DNNL_ARG_DST, L.Mem(dst)}},
            {src}, pd);
  L.Bind(output, dst);
  return {};
}

Status LowerMatMulNd(Lowering& L, const Node& n, bool relu, const MatMulFusion* fusion) {
  return MatMulNd(L, n, relu, fusion);
}

Status LowerDnnlOp(Lowering& L, const Node& n, bool fuse_relu, bool* handled) {
  *handled = true;
  float p = 0;
  switch (n.op) {
    case OpType::kSigmoid:
      return Eltwise(L, n, algorithm::eltwise_logistic, 0, 0);
    case OpType::kTanh:
      return Eltwise(L, n, algorithm::eltwise_tanh, 0, 0);
    case OpType::kHardSwish:
      return Eltwise(L, n, algorithm::eltwise_hardswish, 1.0f / 6.0f, 0.5f);
    case OpType::kSqrt:
      return Eltwise(L, n, algorithm::eltwise_sqrt, 0, 0);
    case OpType::kExp:
      return Eltwise(L, n, algorithm::eltwise_exp, 0, 0);
    case OpType::kNeg:
      return Eltwise(L, n, algorithm::eltwise_linear, -1.0f, 0);
    case OpType::kHardSigmoid: {
      dnnl::post_ops po;
      po.append_eltwise(algorithm::eltwise_clip, 0.0f, 1.0f);
      return Eltwise(L, n, algorithm::eltwise_linear, n.FloatAttr("alpha", 0.2f),
                     n.FloatAttr("beta", 0.5f), &po);
    }
    case OpType::kClip: {
      float lo = n.FloatAttr("min", -3.4e38f), hi = n.FloatAttr("max", 3.4e38f);
      const bool has_lo = n.inputs.size() > 1 && !n.inputs[1].empty();
      const bool has_hi = n.inputs.size() > 2 && !n.inputs[2].empty();
      if ((has_lo && !ScalarConstant(L, n.inputs[1], &lo)) ||
          (has_hi && !ScalarConstant(L, n.inputs[2], &hi))) {
        break;
      }
      return Eltwise(L, n, algorithm::eltwise_clip, lo, hi);
    }
    case OpType::kPow:
      if (!ScalarConstant(L, n.inputs[1], &p) || L.IsConstant(n.inputs[0])) break;
      return Eltwise(L, n, algorithm::eltwise_pow, 1.0f, p);
    case OpType::kLayerNormalization:
      return LayerNorm(L, n);
    case OpType::kMatMul:
      return MatMulNd(L, n, fuse_relu, nullptr);
    case OpType::kAdd:
    case OpType::kMul:
    case OpType::kSub:
    case OpType::kDiv: {
      const algorithm alg = n.op == OpType::kAdd   ? algorithm::binary_add
                            : n.op == OpType::kMul ? algorithm::binary_mul
                            : n.op == OpType::kSub ? algorithm::binary_sub
                                                   : algorithm::binary_div;
      *handled = false;
      SHOAL_RETURN_IF_ERROR(Binary(L, n, alg, n.inputs[0], n.inputs[1], fuse_relu, handled));
      const bool commutes = n.op == OpType::kAdd || n.op == OpType::kMul;
      if (!*handled && commutes) {
        SHOAL_RETURN_IF_ERROR(Binary(L, n, alg, n.inputs[1], n.inputs[0], fuse_relu, handled));
      }
      return {};
    }
    default:
      break;
  }
  *handled = false;
  return {};
}

}  // namespace shoal::inference::cpu
