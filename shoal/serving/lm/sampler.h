// Picks the next token from a step's logits: greedy (temperature 0), or temperature and top-p
// (nucleus) sampling from a per-request generator seeded by the request, so that one request
// with one seed gives the same tokens whatever else runs beside it.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace shoal::lm {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  int Next(std::span<const float> logits);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> probs_;
};

}  // namespace shoal::lm
