// One forward step of the shoal-gpt decoder over several sequences at once (continuous
// batching): every sequence brings its new tokens (a prompt, or the one token it sampled last)
// at its own position, its own KV cache and its own LoRA adapter; the linears run as one matmul
// over all the step's tokens (oneDNN sgemm), attention and the low-rank adapter products per
// sequence.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "shoal/serving/lm/lm_weights.h"

namespace shoal::lm {

// A sequence's keys and values, per layer [n_ctx, d], filled up to `length` positions.
class KvCache {
 public:
  explicit KvCache(const LmConfig& c);
  int length = 0;
  float* k(int layer, int pos) { return data_.data() + Offset(layer, pos); }
  float* v(int layer, int pos) { return data_.data() + Offset(layer, pos) + stride_; }

 private:
  size_t Offset(int layer, int pos) const {
    return (static_cast<size_t>(layer) * n_ctx_ + static_cast<size_t>(pos)) * 2 * stride_;
  }
  size_t stride_;
  size_t n_ctx_;
  std::vector<float> data_;
};

struct StepInput {
  KvCache* cache = nullptr;              // advanced by tokens.size()
  std::span<const int> tokens;           // at positions cache->length, ...; length + size <= n_ctx
  const LoraAdapter* adapter = nullptr;  // null: the base model
  float* logits = nullptr;               // [vocab]: the logits after the last token
};

class LmForward {
 public:
  // `max_threads` 0: OpenMP's default (OMP_NUM_THREADS, else every core).
  explicit LmForward(std::shared_ptr<const LmWeights> weights, int max_threads = 0);
  const LmConfig& config() const { return w_->config; }
  void Step(std::span<const StepInput> inputs);

 private:
  void Linear(int layer, lm::Linear which, const float* x, float* y, int rows,
              std::span<const StepInput> inputs);
  void Attention(int layer, std::span<const StepInput> inputs);

  std::shared_ptr<const LmWeights> w_;
  int max_threads_;
  // Scratch, sized for the largest step so far: [tokens, width].
  std::vector<float> x_, h_, qkv_, att_, fc_, lora_, last_;
  std::vector<int> pos_;
};

}  // namespace shoal::lm
