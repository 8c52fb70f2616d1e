// Local training of an MLP (input -> hidden, ReLU -> classes, softmax cross-entropy) with
// minibatch SGD: what a simulated FL client computes between fetching a model and pushing an
// update. Parameters are one contiguous float32 vector holding PyTorch's tensors in order:
//   fc1.weight [H, D] row-major, fc1.bias [H], fc2.weight [C, H] row-major, fc2.bias [C]
// so a client sends it as an update and loads a global model from one without copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/tools/flsim/dataset.h"

namespace shoal::client {

struct MlpShape {
  int inputs = 784;
  int hidden = 128;
  int classes = 10;

  size_t Fc1WeightOffset() const { return 0; }
  size_t Fc1BiasOffset() const { return size_t(hidden) * size_t(inputs); }
  size_t Fc2WeightOffset() const { return Fc1BiasOffset() + size_t(hidden); }
  size_t Fc2BiasOffset() const { return Fc2WeightOffset() + size_t(classes) * size_t(hidden); }
  size_t NumParams() const { return Fc2BiasOffset() + size_t(classes); }
};

// One named tensor inside the parameter vector.
struct TensorSlice {
  std::string name;            // "fc1.weight", ...
  std::vector<int64_t> shape;  // PyTorch's [out, in] for weights
  size_t offset = 0;           // in floats from the start of the vector
  size_t size = 0;             // in floats
};

// The four tensors, in the order they lie in the vector.
std::vector<TensorSlice> MlpTensorLayout(const MlpShape& shape);

// PyTorch's nn.Linear default: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
std::vector<float> InitMlpParams(const MlpShape& shape, uint64_t seed);

struct SgdOptions {
  float learning_rate = 0.1F;
  int batch_size = 32;
  float momentum = 0.0F;      // 0: plain SGD; the buffer restarts at each Train call
  float weight_decay = 0.0F;  // L2, added to the gradient as in torch.optim.SGD
};

struct TrainStats {
  int steps = 0;
  size_t samples = 0;      // samples seen (steps * batch size)
  double mean_loss = 0.0;  // mean training loss over those samples
};

struct EvalResult {
  double accuracy = 0.0;
  double loss = 0.0;  // mean cross-entropy
  size_t samples = 0;
};

// Not thread-safe: one trainer per simulated client (or per thread). Its scratch buffers are
// sized once, so steps allocate nothing.
class MlpTrainer {
 public:
  // `seed` fixes the shuffling; the same seed, params and data give the same result.
  MlpTrainer(MlpShape shape, SgdOptions options, uint64_t seed);

  const MlpShape& shape() const { return shape_; }
  const SgdOptions& options() const { return options_; }

  // Runs `steps` SGD steps on `params` in place, over the samples `indices` of `data`, in an
  // order reshuffled each time the indices are used up (the shuffle continues across calls).
  // An empty `indices` means every sample of `data`.
  Result<TrainStats> Train(std::span<float> params, const Dataset& data,
                           std::span<const uint32_t> indices, int steps);

  // Mean cross-entropy over the batch and its gradient with respect to every parameter
  // (written to `grad`, NumParams() floats). `x` is [batch, inputs] row-major.
  double LossAndGradient(std::span<const float> params, const float* x, const uint8_t* y, int batch,
                         std::span<float> grad);

 private:
  void EnsureScratch(int batch);

  MlpShape shape_;
  SgdOptions options_;
  std::mt19937_64 rng_;
  std::vector<uint32_t> source_;  // the training indices as given to Train
  std::vector<uint32_t> order_;   // their current shuffle
  size_t cursor_ = 0;
  std::vector<float> grad_, velocity_, batch_x_, hidden_, dlogits_, dhidden_;
  std::vector<uint8_t> batch_y_;
};

// Logits [batch, classes] for `x` [batch, inputs]; `hidden` is scratch of batch*hidden floats
// that holds the ReLU activations afterwards. For inference and evaluation.
void ForwardBatch(const MlpShape& shape, std::span<const float> params, const float* x, int batch,
                  float* hidden, float* logits);

// Accuracy and mean cross-entropy of `params` over all of `data`.
Result<EvalResult> Evaluate(const MlpShape& shape, std::span<const float> params,
                            const Dataset& data);

}  // namespace shoal::client
