// Fusions into a MatMul with constant 2-D weights (the transformers' linear layers): the bias
// Add that follows it and the erf GELU torch exports F.gelu as (Div by sqrt 2, Erf, Add 1, Mul
// by the input, Mul by 0.5) become the matmul primitive's bias and gelu_erf post-op: one pass
// over [tokens, 3072] instead of seven.
#include <cmath>

#include "shoal/serving/cpu/cpu_lowering.h"

namespace shoal::inference::cpu {
namespace {

// The only node reading `t`, or null (none, several, or a graph output).
const Node* Sole(const std::vector<Node>& nodes, const Graph& g, const std::string& t) {
  for (const ValueInfo& out : g.outputs) {
    if (out.name == t) return nullptr;
  }
  const Node* only = nullptr;
  for (const Node& n : nodes) {
    for (const std::string& in : n.inputs) {
      if (in != t) continue;
      if (only != nullptr) return nullptr;
      only = &n;
    }
  }
  return only;
}

bool ScalarIs(const Lowering& L, const std::string& t, float want, float tol) {
  if (!L.IsConstant(t)) return false;
  const Initializer& init = L.Constant(t);
  const size_t count = init.is_int() ? init.ints.size() : init.floats.size();
  if (count != 1) return false;
  const float v = init.is_int() ? static_cast<float>(init.ints[0]) : init.floats[0];
  return std::abs(v - want) <= tol;
}

// The input of binary `n` that is not `t` ("" when both are).
std::string Other(const Node& n, const std::string& t) {
  if (n.inputs.size() != 2) return "";
  if (n.inputs[0] == t && n.inputs[1] != t) return n.inputs[1];
  if (n.inputs[1] == t && n.inputs[0] != t) return n.inputs[0];
  return "";
}

}  // namespace

MatMulFusion FindMatMulFusion(const std::vector<Node>& nodes, const Graph& g, const Lowering& L,
                              const Node& mm) {
  MatMulFusion f;
  f.output = mm.outputs[0];
  if (mm.op != OpType::kMatMul || !L.IsConstant(mm.inputs[1]) ||
      L.Shape(mm.inputs[1]).size() != 2) {
    return f;
  }
  const int64_t cols = L.Shape(mm.inputs[1])[1];
  if (const Node* add = Sole(nodes, g, f.output); add != nullptr && add->op == OpType::kAdd) {
    const std::string b = Other(*add, f.output);
    if (!b.empty() && L.IsConstant(b) && L.Shape(b) == std::vector<int64_t>{cols}) {
      f.bias = b;
      f.fused.push_back(add);
      f.output = add->outputs[0];
    }
  }
  // GELU (erf): h -> Div(h, sqrt 2) -> Erf -> Add(., 1) -> Mul(h, .) -> Mul(., 0.5).
  const std::string h = f.output;
  const Node *div = nullptr, *mul1 = nullptr;
  size_t readers = 0;
  for (const Node& n : nodes) {
    for (const std::string& in : n.inputs) {
      if (in != h) continue;
      ++readers;
      if (n.op == OpType::kDiv && n.inputs[0] == h) div = &n;
      if (n.op == OpType::kMul) mul1 = &n;
    }
  }
  if (readers != 2 || div == nullptr || mul1 == nullptr) return f;
  if (!ScalarIs(L, div->inputs[1], std::sqrt(2.0f), 1e-4f)) return f;
  const Node* erf = Sole(nodes, g, div->outputs[0]);
  if (erf == nullptr || erf->op != OpType::kErf) return f;
  const Node* one = Sole(nodes, g, erf->outputs[0]);
  if (one == nullptr || one->op != OpType::kAdd ||
      !ScalarIs(L, Other(*one, erf->outputs[0]), 1.0f, 0)) {
    return f;
  }
  if (Sole(nodes, g, one->outputs[0]) != mul1 || Other(*mul1, h) != one->outputs[0]) return f;
  const Node* half = Sole(nodes, g, mul1->outputs[0]);
  if (half == nullptr || half->op != OpType::kMul ||
      !ScalarIs(L, Other(*half, mul1->outputs[0]), 0.5f, 0)) {
    return f;
  }
  f.gelu = true;
  for (const Node* n : {div, erf, one, mul1, half}) f.fused.push_back(n);
  f.output = half->outputs[0];
  return f;
}

MatMulFusion FindGeluTanh(const std::vector<Node>& nodes, const Graph& g, const Lowering& L,
                          const Node& first) {
  // GPT-2's gelu_new: 0.5x * (1 + tanh(0.79788456 * (x + 0.044715 * x^3))), as Mul(x, 0.5),
  // Pow(x, 3), Mul(., 0.044715), Add(x, .), Mul(., 0.79788), Tanh, Add(., 1), Mul(half, .).
  MatMulFusion f;
  if (first.inputs.empty() || L.IsConstant(first.inputs[0])) return f;
  const std::string x = first.inputs[0];
  const Node *half = nullptr, *pow = nullptr, *sum = nullptr;
  size_t readers = 0;
  for (const Node& n : nodes) {
    for (const std::string& in : n.inputs) {
      if (in != x) continue;
      ++readers;
      if (n.op == OpType::kMul && ScalarIs(L, Other(n, x), 0.5f, 0)) half = &n;
      if (n.op == OpType::kPow && n.inputs[0] == x && ScalarIs(L, n.inputs[1], 3.0f, 0)) pow = &n;
      if (n.op == OpType::kAdd) sum = &n;
    }
  }
  if (readers != 3 || half == nullptr || pow == nullptr || sum == nullptr) return f;
  if (&first != half && &first != pow) return f;  // matched once, from the first reader of x
  const Node* cube = Sole(nodes, g, pow->outputs[0]);
  if (cube == nullptr || cube->op != OpType::kMul ||
      !ScalarIs(L, Other(*cube, pow->outputs[0]), 0.044715f, 1e-6f) ||
      Sole(nodes, g, cube->outputs[0]) != sum || Other(*sum, x) != cube->outputs[0]) {
    return f;
  }
  const Node* scale = Sole(nodes, g, sum->outputs[0]);
  if (scale == nullptr || scale->op != OpType::kMul ||
      !ScalarIs(L, Other(*scale, sum->outputs[0]), 0.7978845608f, 1e-5f)) {
    return f;
  }
  const Node* tanh = Sole(nodes, g, scale->outputs[0]);
  if (tanh == nullptr || tanh->op != OpType::kTanh) return f;
  const Node* one = Sole(nodes, g, tanh->outputs[0]);
  if (one == nullptr || one->op != OpType::kAdd ||
      !ScalarIs(L, Other(*one, tanh->outputs[0]), 1.0f, 0)) {
    return f;
  }
  const Node* out = Sole(nodes, g, one->outputs[0]);
  if (out == nullptr || out->op != OpType::kMul ||
      Other(*out, one->outputs[0]) != half->outputs[0] || Sole(nodes, g, half->outputs[0]) != out) {
    return f;
  }
  f.gelu = true;
  f.fused = {half, pow, cube, sum, scale, tanh, one, out};
  f.output = out->outputs[0];
  return f;
}

}  // namespace shoal::inference::cpu
