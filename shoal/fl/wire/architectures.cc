#include "shoal/fl/wire/architectures.h"

#include <cmath>
#include <random>
#include <string>

namespace shoal::model {
namespace {

void AddLinear(std::vector<TensorSpec>& out, const std::string& name, uint64_t in, uint64_t outs) {
  out.push_back({name + ".weight", {outs, in}, in});
  out.push_back({name + ".bias", {outs}, in});
}

void AddConv(std::vector<TensorSpec>& out, const std::string& name, uint64_t in, uint64_t outs,
             uint64_t k) {
  out.push_back({name + ".weight", {outs, in, k, k}, in * k * k});
  out.push_back({name + ".bias", {outs}, in * k * k});
}

}  // namespace

ModelSpec LogRegSpec(uint64_t inputs, uint64_t classes) {
  std::vector<TensorSpec> t;
  AddLinear(t, "fc", inputs, classes);
  return ModelSpec(std::move(t));
}

ModelSpec MlpSpec(uint64_t inputs, const std::vector<uint64_t>& hidden, uint64_t classes) {
  std::vector<TensorSpec> t;
  uint64_t in = inputs;
  for (size_t i = 0; i < hidden.size(); ++i) {
    AddLinear(t, "fc" + std::to_string(i + 1), in, hidden[i]);
    in = hidden[i];
  }
  AddLinear(t, "fc" + std::to_string(hidden.size() + 1), in, classes);
  return ModelSpec(std::move(t));
}

ModelSpec CnnSpec(uint64_t hidden, uint64_t classes) {
  std::vector<TensorSpec> t;
  AddConv(t, "conv1", 1, 32, 3);
  AddConv(t, "conv2", 32, 64, 3);
  AddLinear(t, "fc1", 64 * 12 * 12, hidden);
  AddLinear(t, "fc2", hidden, classes);
  return ModelSpec(std::move(t));
}

Result<ModelSpec> ArchitectureSpec(std::string_view name, const ArchitectureOptions& o) {
  if (o.inputs == 0 || o.classes == 0) {
    return InvalidArgument("architecture '" + std::string(name) +
                           "': inputs and classes must be > 0");
  }
  for (uint64_t h : o.hidden) {
    if (h == 0)
      return InvalidArgument("architecture '" + std::string(name) + "': hidden sizes must be > 0");
  }
  if (name == "logreg") return LogRegSpec(o.inputs, o.classes);
  if (name == "mlp") return MlpSpec(o.inputs, o.hidden, o.classes);
  if (name == "cnn") {
    if (o.hidden.size() != 1) {
      return InvalidArgument("architecture 'cnn': exactly one hidden size (fc1) expected");
    }
    return CnnSpec(o.hidden[0], o.classes);
  }
  return InvalidArgument("unknown architecture '" + std::string(name) +
                         "' (built-ins: logreg, mlp, cnn)");
}

Model InitModel(const ModelSpec& spec, uint64_t seed) {
  Model m(spec);
  // mt19937_64's output sequence is fixed by the standard; the distributions are not, so the
  // float is built from the top 24 bits by hand.
  std::mt19937_64 gen(seed);
  for (size_t i = 0; i < spec.size(); ++i) {
    const TensorSpec& t = spec.tensor(i);
    std::span<float> v = m.tensor(i);
    if (t.fan_in == 0) continue;
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t.fan_in)));
    for (float& x : v) {
      const float u = static_cast<float>(gen() >> 40) * 0x1p-24f;  // [0, 1)
      x = (2.0f * u - 1.0f) * bound;
    }
  }
  return m;
}

}  // namespace shoal::model
