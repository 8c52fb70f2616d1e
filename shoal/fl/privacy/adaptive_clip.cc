#include "shoal/fl/privacy/adaptive_clip.h"

#include <cmath>

namespace shoal::privacy {

double UpdateNoiseMultiplier(double sigma, double count_sigma) {
  if (sigma == 0) return 0;
  return 1 / std::sqrt(1 / (sigma * sigma) - 1 / (4 * count_sigma * count_sigma));
}

double DefaultCountNoiseMultiplier(double expected_clients) { return expected_clients / 20; }

ClipUpdate NextAdaptiveClip(double clip, size_t unclipped, size_t n, double target_quantile,
                            double learning_rate, double count_sigma, GaussianNoise& noise) {
  ClipUpdate u;
  const double count = static_cast<double>(unclipped) + count_sigma * noise.Normal();
  u.unclipped_fraction = n == 0 ? 0 : count / static_cast<double>(n);
  u.next_clip = clip * std::exp(-learning_rate * (u.unclipped_fraction - target_quantile));
  return u;
}

}  // namespace shoal::privacy
