// Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy: "Differentially Private Learning with
// Adaptive Clipping", NeurIPS 2021): the clip norm C follows a target quantile γ of the updates'
// norms. Each round, b = (Σ_k [‖Δ_k‖ <= C] + N(0, σ_b^2)) / n and C <- C · exp(-η (b - γ)).
// The count's noise spends privacy too: the update's noise multiplier becomes
// σ_Δ = (σ^-2 - (2 σ_b)^-2)^(-1/2), so that the pair is accounted as one Gaussian mechanism
// with the job's σ (the paper's Theorem 1).
#pragma once

#include <cstddef>

#include "shoal/fl/privacy/gaussian_noise.h"

namespace shoal::privacy {

// σ_Δ for the update's noise given the job's σ and the count's σ_b (σ 0: 0; needs 2σ_b > σ).
double UpdateNoiseMultiplier(double sigma, double count_sigma);

// σ_b where the spec leaves it out: expected clients / 20 (the paper's and Flower's default).
double DefaultCountNoiseMultiplier(double expected_clients);

struct ClipUpdate {
  double next_clip = 0;
  double unclipped_fraction = 0;  // b above, noised
};

// The next round's C from this round's: `unclipped` of the round's `n` updates had norm <= C.
ClipUpdate NextAdaptiveClip(double clip, size_t unclipped, size_t n, double target_quantile,
                            double learning_rate, double count_sigma, GaussianNoise& noise);

}  // namespace shoal::privacy
