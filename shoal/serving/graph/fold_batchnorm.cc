// BatchNormalization folding: y = (x - mean) * scale / sqrt(var + eps) + shift is affine per
// channel, so when x comes straight out of a Conv (or a Gemm with constant weights) it folds
// into that node's weights and bias and inference runs one primitive instead of two.
#include <cmath>
#include <cstddef>
#include <set>
#include <string>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference {
namespace {

size_t Consumers(const Graph& g, const std::string& tensor) {
  size_t n = 0;
  for (const Node& node : g.nodes) {
    for (const std::string& t : node.inputs) n += t == tensor ? 1 : 0;
  }
  for (const ValueInfo& out : g.outputs) n += out.name == tensor ? 1 : 0;
  return n;
}

const Initializer* FloatInit(const Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.is_int()) return nullptr;
  return &it->second;
}

// Per-channel multiplier and offset of one BatchNormalization node.
struct Affine {
  std::vector<float> mul, add;
};

Result<Affine> BatchNormAffine(const Graph& g, const Node& bn) {
  const Initializer* p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = FloatInit(g, bn.inputs[static_cast<size_t>(i) + 1]);
    if (p[i] == nullptr) {
      return InvalidArgument("node '" + bn.name + "': '" + bn.inputs[static_cast<size_t>(i) + 1] +
                             "' must be a float initializer to fold");
    }
  }
  const float eps = bn.FloatAttr("epsilon", 1e-5f);
  const size_t c = p[0]->floats.size();
  Affine a{std::vector<float>(c), std::vector<float>(c)};
  for (size_t i = 0; i < c; ++i) {
    const double s = p[0]->floats[i] / std::sqrt(static_cast<double>(p[3]->floats[i]) + eps);
    a.mul[i] = static_cast<float>(s);
    a.add[i] = static_cast<float>(p[1]->floats[i] - p[2]->floats[i] * s);
  }
  return a;
}

// Folds `bn` into the Conv or Gemm `prev`; false when the pair does not qualify.
Result<bool> FoldInto(Graph& g, Node& prev, const Node& bn) {
  const Initializer* w = FloatInit(g, prev.inputs[1]);
  if (w == nullptr) return false;
  const bool has_bias = prev.inputs.size() > 2 && !prev.inputs[2].empty();
  const Initializer* b = has_bias ? FloatInit(g, prev.inputs[2]) : nullptr;
  if (has_bias && b == nullptr) return false;
  auto aff = BatchNormAffine(g, bn);
  if (!aff.ok()) return aff.status();
  const size_t channels = aff->mul.size();

  Initializer nw = *w;
  std::vector<float> nb(channels, 0.0f);
  float bias_scale = 1.0f;
  if (prev.op == OpType::kConv) {
    if (w->shape.empty() || static_cast<size_t>(w->shape[0]) != channels) return false;
    const size_t per = nw.floats.size() / channels;
    for (size_t o = 0; o < channels; ++o) {
      for (size_t i = 0; i < per; ++i) nw.floats[o * per + i] *= aff->mul[o];
    }
    if (b != nullptr && b->floats.size() != channels) return false;
  } else {  // Gemm: output column n scales row n of B^T (transB) or column n of B.
    if (w->shape.size() != 2) return false;
    const bool tb = prev.IntAttr("transB", 0) != 0;
    const size_t rows = static_cast<size_t>(w->shape[0]), cols = static_cast<size_t>(w->shape[1]);
    if ((tb ? rows : cols) != channels) return false;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t col = 0; col < cols; ++col) nw.floats[r * cols + col] *= aff->mul[tb ? r : col];
    }
    // C must be one value per column (or absent) to stay a bias after folding.
    if (b != nullptr && b->floats.size() != channels) return false;
    bias_scale = prev.FloatAttr("beta", 1.0f);
    prev.attributes["beta"] = 1.0f;
  }
  for (size_t o = 0; o < channels; ++o) {
    const float old = b != nullptr ? b->floats[o] * bias_scale : 0.0f;
    nb[o] = old * aff->mul[o] + aff->add[o];
  }
  const std::string wname = prev.inputs[1] + kFoldedSuffix;
  const std::string bname = (has_bias ? prev.inputs[2] : prev.name + ".bias") + kFoldedSuffix;
  g.initializers[wname] = std::move(nw);
  g.initializers[bname] = Initializer{{static_cast<int64_t>(channels)}, std::move(nb), {}};
  prev.inputs.resize(3);
  prev.inputs[1] = wname;
  prev.inputs[2] = bname;
  prev.outputs[0] = bn.outputs[0];
  return true;
}

}  // namespace

Status FoldBatchNorm(Graph& graph) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t i = 0; i < graph.nodes.size() && !changed; ++i) {
      const Node& bn = graph.nodes[i];
      if (bn.op != OpType::kBatchNormalization || bn.inputs.size() != 5) continue;
      const std::string x = bn.inputs[0];
      if (Consumers(graph, x) != 1) continue;
      for (Node& prev : graph.nodes) {
        if ((prev.op != OpType::kConv && prev.op != OpType::kGemm) || prev.outputs.empty() ||
            prev.outputs[0] != x) {
          continue;
        }
        auto folded = FoldInto(graph, prev, bn);
        if (!folded.ok()) return folded.status();
        if (*folded) {
          graph.nodes.erase(graph.nodes.begin() + static_cast<ptrdiff_t>(i));
          changed = true;
        }
        break;
      }
    }
  }
  // Drop initializers nothing reads any more (the unfolded weights, the BN statistics).
  std::set<std::string, std::less<>> used;
  for (const Node& n : graph.nodes) used.insert(n.inputs.begin(), n.inputs.end());
  for (auto it = graph.initializers.begin(); it != graph.initializers.end();) {
    it = used.count(it->first) != 0 ? std::next(it) : graph.initializers.erase(it);
  }
  return {};
}

}  // namespace shoal::inference
