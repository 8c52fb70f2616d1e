#include "shoal/serving/graph/architectures_graph.h"

#include <cmath>
#include <random>
#include <string>
#include <utility>

namespace shoal::inference {
namespace {

// Appends nodes and zero-filled initializers; each method returns the output tensor's name.
class Builder {
 public:
  explicit Builder(std::string name, std::vector<int64_t> input_shape) {
    g_.name = std::move(name);
    g_.inputs.push_back({kGraphInput, DType::kF32, std::move(input_shape)});
  }

  std::string Param(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    g_.initializers[name] =
        Initializer{std::move(shape), std::vector<float>(static_cast<size_t>(n), 0.0f), {}};
    return name;
  }

  // nn.Linear as torch.onnx exports it: Gemm(x, W[out,in], b) with transB=1.
  std::string Linear(const std::string& name, const std::string& x, int64_t in, int64_t out) {
    Node n{OpType::kGemm,
           name,
           {x, Param(name + ".weight", {out, in}), Param(name + ".bias", {out})},
           {name + ".out"},
           {{"transB", int64_t{1}}}};
    return Add(std::move(n));
  }

  std::string Conv(const std::string& name, const std::string& x, int64_t in, int64_t out,
                   int64_t k, int64_t stride, int64_t pad, bool bias) {
    Node n{OpType::kConv,
           name,
           {x, Param(name + ".weight", {out, in, k, k})},
           {name + ".out"},
           {{"kernel_shape", std::vector<int64_t>{k, k}},
            {"strides", std::vector<int64_t>{stride, stride}},
            {"pads", std::vector<int64_t>{pad, pad, pad, pad}}}};
    if (bias) n.inputs.push_back(Param(name + ".bias", {out}));
    return Add(std::move(n));
  }

  std::string BatchNorm(const std::string& name, const std::string& x, int64_t c) {
    Node n{OpType::kBatchNormalization,
           name,
           {x, Param(name + ".weight", {c}), Param(name + ".bias", {c}),
            Param(name + ".running_mean", {c}), Param(name + ".running_var", {c})},
           {name + ".out"},
           {{"epsilon", 1e-5f}}};
    return Add(std::move(n));
  }

  std::string Op(OpType op, const std::string& name, std::vector<std::string> in,
                 std::map<std::string, AttributeValue> attrs = {}) {
    return Add(Node{op, name, std::move(in), {name + ".out"}, std::move(attrs)});
  }

  // The last node writes the graph output under its public name.
  Graph Finish() {
    g_.nodes.back().outputs[0] = kGraphOutput;
    g_.outputs.push_back({kGraphOutput, DType::kF32, {}});
    return std::move(g_);
  }

 private:
  std::string Add(Node n) {
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back().outputs[0];
  }
  Graph g_;
};

std::string Relu(Builder& b, const std::string& name, const std::string& x) {
  return b.Op(OpType::kRelu, name, {x});
}

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) like PyTorch's default init, from a 64-bit Mersenne
// Twister whose sequence the standard fixes (the float is built by hand for the same reason).
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : gen_(seed) {}
  float operator()(float lo, float hi) {
    const float u = static_cast<float>(gen_() >> 40) * 0x1p-24f;
    return lo + (hi - lo) * u;
  }

 private:
  std::mt19937_64 gen_;
};

void FillResNetWeights(Graph& g, uint64_t seed) {
  Uniform u(seed);
  for (auto& [name, init] : g.initializers) {  // std::map: a fixed order
    auto ends = [&](const char* s) {
      const std::string suf = s;
      return name.size() >= suf.size() &&
             name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
    };
    const bool bn = name.find(".bn") != std::string::npos || name.rfind("bn1", 0) == 0 ||
                    name.find("downsample.1") != std::string::npos;
    for (float& v : init.floats) {
      if (bn && ends(".weight")) {
        v = u(0.5f, 1.5f);
      } else if (bn && ends(".running_var")) {
        v = u(0.5f, 1.5f);
      } else if (bn) {
        v = u(-0.1f, 0.1f);  // bias, running_mean
      } else {
        int64_t fan_in = 1;
        for (size_t d = 1; d < init.shape.size(); ++d) fan_in *= init.shape[d];
        if (init.shape.size() == 1) fan_in = 512;  // fc.bias: a small value
        const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
        v = u(-bound, bound);
      }
    }
  }
}

}  // namespace

Graph LogRegGraph(int64_t inputs, int64_t classes) {
  Builder b("logreg", {-1, inputs});
  b.Linear("fc", kGraphInput, inputs, classes);
  return b.Finish();
}

Graph MlpGraph(int64_t inputs, const std::vector<int64_t>& hidden, int64_t classes) {
  Builder b("mlp", {-1, inputs});
  std::string x = kGraphInput;
  int64_t in = inputs;
  for (size_t i = 0; i < hidden.size(); ++i) {
    const std::string fc = "fc" + std::to_string(i + 1);
    x = Relu(b, fc + ".relu", b.Linear(fc, x, in, hidden[i]));
    in = hidden[i];
  }
  b.Linear("fc" + std::to_string(hidden.size() + 1), x, in, classes);
  return b.Finish();
}

Graph CnnGraph(int64_t hidden, int64_t classes) {
  Builder b("cnn", {-1, 1, 28, 28});
  std::string x = Relu(b, "conv1.relu", b.Conv("conv1", kGraphInput, 1, 32, 3, 1, 0, true));
  x = Relu(b, "conv2.relu", b.Conv("conv2", x, 32, 64, 3, 1, 0, true));
  x = b.Op(OpType::kMaxPool, "pool", {x},
           {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  x = b.Op(OpType::kFlatten, "flatten", {x}, {{"axis", int64_t{1}}});
  x = Relu(b, "fc1.relu", b.Linear("fc1", x, 64 * 12 * 12, hidden));
  b.Linear("fc2", x, hidden, classes);
  return b.Finish();
}

Graph ResNetGraph(const ResNetOptions& o) {
  Builder b("resnet", {-1, 3, o.image, o.image});
  const int64_t stem = o.widths.front();
  std::string x;
  if (o.small_stem) {
    x = b.Conv("conv1", kGraphInput, 3, stem, 3, 1, 1, false);
  } else {
    x = b.Conv("conv1", kGraphInput, 3, stem, 7, 2, 3, false);
  }
  x = Relu(b, "relu", b.BatchNorm("bn1", x, stem));
  if (!o.small_stem) {
    x = b.Op(OpType::kMaxPool, "maxpool", {x},
             {{"kernel_shape", std::vector<int64_t>{3, 3}},
              {"strides", std::vector<int64_t>{2, 2}},
              {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  }
  int64_t in = stem;
  for (size_t l = 0; l < o.widths.size(); ++l) {
    const int64_t w = o.widths[l];
    for (int64_t j = 0; j < o.blocks[l]; ++j) {
      const std::string p = "layer" + std::to_string(l + 1) + "." + std::to_string(j);
      const int64_t stride = (j == 0 && l > 0) ? 2 : 1;
      std::string y = b.Conv(p + ".conv1", x, in, w, 3, stride, 1, false);
      y = Relu(b, p + ".relu1", b.BatchNorm(p + ".bn1", y, w));
      y = b.BatchNorm(p + ".bn2", b.Conv(p + ".conv2", y, w, w, 3, 1, 1, false), w);
      std::string identity = x;
      if (stride != 1 || in != w) {
        identity = b.Conv(p + ".downsample.0", x, in, w, 1, stride, 0, false);
        identity = b.BatchNorm(p + ".downsample.1", identity, w);
      }
      x = Relu(b, p + ".relu2", b.Op(OpType::kAdd, p + ".add", {y, identity}));
      in = w;
    }
  }
  x = b.Op(OpType::kGlobalAveragePool, "avgpool", {x});
  x = b.Op(OpType::kFlatten, "flatten", {x}, {{"axis", int64_t{1}}});
  b.Linear("fc", x, in, o.classes);
  Graph g = b.Finish();
  FillResNetWeights(g, o.seed);
  return g;
}

}  // namespace shoal::inference
