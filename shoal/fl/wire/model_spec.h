// The shape of a model: its ordered, named float32 tensors (PyTorch names and row-major
// layout), and Model, one contiguous float32 buffer holding a value for every parameter.
// Updates, checkpoints and safetensors files are all checked against a ModelSpec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shoal::model {

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  // Inputs feeding one output unit (PyTorch's fan_in of the layer the tensor belongs to);
  // initialisation draws from U(-1/sqrt(fan_in), 1/sqrt(fan_in)). 0 initialises to zero.
  uint64_t fan_in = 0;

  uint64_t numel() const;
};

// "[128,784]"
std::string ShapeString(std::span<const uint64_t> shape);

class ModelSpec {
 public:
  ModelSpec() = default;
  // Tensors keep the given order; each starts at the running element offset.
  explicit ModelSpec(std::vector<TensorSpec> tensors);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  const TensorSpec& tensor(size_t i) const { return tensors_[i]; }
  // Element offset of tensor i inside a Model's flat buffer.
  uint64_t offset(size_t i) const { return offsets_[i]; }
  std::optional<size_t> Find(std::string_view name) const;
  uint64_t num_params() const { return num_params_; }

 private:
  std::vector<TensorSpec> tensors_;
  std::vector<uint64_t> offsets_;
  uint64_t num_params_ = 0;
};

// A model's values: every tensor of `spec`, in spec order, in one float32 buffer.
struct Model {
  ModelSpec spec;
  std::vector<float> values;

  explicit Model(ModelSpec s) : spec(std::move(s)), values(spec.num_params(), 0.0f) {}
  std::span<float> tensor(size_t i) {
    return {values.data() + spec.offset(i), spec.tensor(i).numel()};
  }
  std::span<const float> tensor(size_t i) const {
    return {values.data() + spec.offset(i), spec.tensor(i).numel()};
  }
};

}  // namespace shoal::model
