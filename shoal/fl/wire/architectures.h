// Shoal's built-in FL architectures, named and laid out as PyTorch names and lays out the same
// modules (nn.Linear weight [out,in], nn.Conv2d weight [out,in,kh,kw]), and their
// deterministic initialisation, so a job can start without an uploaded model and a PyTorch
// client can load the same tensors.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/wire/model_spec.h"

namespace shoal::model {

// `logreg`: multinomial logistic regression.
//   fc.weight [classes,inputs], fc.bias [classes]
ModelSpec LogRegSpec(uint64_t inputs = 784, uint64_t classes = 10);

// `mlp`: Linear -> ReLU -> ... -> Linear. With hidden = {h1, ..., hk}:
//   fc1.weight [h1,inputs], fc1.bias [h1], ..., fc{k+1}.weight [classes,hk], fc{k+1}.bias
//   [classes]. The default (784 inputs, hidden {128}, 10 classes) has 101,770 parameters.
ModelSpec MlpSpec(uint64_t inputs = 784, const std::vector<uint64_t>& hidden = {128},
                  uint64_t classes = 10);

// `cnn`: LeNet-style net for 1x28x28 inputs (PyTorch's MNIST example without dropout):
//   conv1 = Conv2d(1, 32, 3)    conv1.weight [32,1,3,3]   conv1.bias [32]   28x28 -> 26x26
//   ReLU
//   conv2 = Conv2d(32, 64, 3)   conv2.weight [64,32,3,3]  conv2.bias [64]   26x26 -> 24x24
//   ReLU, MaxPool2d(2)                                                      24x24 -> 12x12
//   flatten (64*12*12 = 9216, channel-major as torch.flatten)
//   fc1 = Linear(9216, hidden)  fc1.weight [hidden,9216]  fc1.bias [hidden]
//   ReLU
//   fc2 = Linear(hidden, classes) fc2.weight [classes,hidden] fc2.bias [classes]
// With hidden 128 and 10 classes: 1,199,882 parameters.
ModelSpec CnnSpec(uint64_t hidden = 128, uint64_t classes = 10);

// Parameters of the built-ins by name, as an FLJob manifest gives them.
struct ArchitectureOptions {
  uint64_t inputs = 784;                 // logreg and mlp only; cnn takes 1x28x28
  std::vector<uint64_t> hidden = {128};  // cnn uses hidden[0] for fc1
  uint64_t classes = 10;
};

// "logreg", "mlp" or "cnn"; kInvalidArgument naming the architecture otherwise, or a zero size.
Result<ModelSpec> ArchitectureSpec(std::string_view name, const ArchitectureOptions& options = {});

// PyTorch's default initialisation for Linear and Conv2d (Kaiming-uniform with a = sqrt(5)
// for weights, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for biases),
// drawn from a generator seeded with `seed`: the same seed gives the same bytes everywhere.
Model InitModel(const ModelSpec& spec, uint64_t seed);

}  // namespace shoal::model
