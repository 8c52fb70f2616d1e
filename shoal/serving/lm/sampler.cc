#include "shoal/serving/lm/sampler.h"

#include <algorithm>
#include <cmath>

namespace shoal::lm {

int Sampler::Next(std::span<const float> logits) {
  int best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int>(i);
  }
  if (p_.temperature <= 0) return best;
  const float m = logits[static_cast<size_t>(best)];
  probs_.clear();
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float e = std::exp((logits[i] - m) / p_.temperature);
    probs_.emplace_back(e, static_cast<int>(i));
    sum += e;
  }
  // Nucleus: the most probable tokens whose mass first reaches top_p (ties by token id).
  std::sort(probs_.begin(), probs_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  size_t keep = probs_.size();
  double kept = sum;
  if (p_.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < probs_.size(); ++i) {
      acc += probs_[i].first;
      if (acc >= p_.top_p * sum) {
        keep = i + 1;
        kept = acc;
        break;
      }
    }
  }
  // 53 random bits as a double in [0, 1): the same draw on every platform.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i].first;
    if (u < acc) return probs_[i].second;
  }
  return probs_[keep - 1].second;
}

}  // namespace shoal::lm
