#include "shoal/fl/wire/model_spec.h"

namespace shoal::model {

uint64_t TensorSpec::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

ModelSpec::ModelSpec(std::vector<TensorSpec> tensors) : tensors_(std::move(tensors)) {
  offsets_.reserve(tensors_.size());
  for (const TensorSpec& t : tensors_) {
    offsets_.push_back(num_params_);
    num_params_ += t.numel();
  }
}

std::optional<size_t> ModelSpec::Find(std::string_view name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return i;
  }
  return std::nullopt;
}

}  // namespace shoal::model
