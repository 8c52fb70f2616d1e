// Model-poisoning attacks a simulated client can mount (shoal-client --attack), to show what a
// job's robust rule (spec.aggregation.robust) withstands. Each rewrites the trained model x
// from the global model g it started from, through its delta x - g:
//   sign-flip     x <- g - (x - g)          (the delta reversed)
//   scale:<k>     x <- g + k (x - g)        (scale:-10 is the "scaled x-10")
//   noise:<sigma> x <- g + N(0, sigma^2)    (the delta replaced by Gaussian noise)
//   label-flip    trained on its data with every label y replaced by C - 1 - y (a data
//                 poisoning attack: the update itself is sent as trained; FlipLabels)
//   lie[:<z>]     "A little is enough" (Baruch et al., NeurIPS 2019): the attackers collude;
//                 each trains honestly, they pool their honest models of one round, and all
//                 send mean - z std of them, per coordinate (LittleIsEnough; the pooling is
//                 lie_board.h). z defaults to the paper's z_max for n clients and f attackers
//                 (LieZ): small enough that the update stays inside the honest spread.
// NaN updates need no attack mode: the leaves refuse non-finite values (400).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::client {

struct AttackSpec {
  enum class Kind { kNone, kSignFlip, kScale, kNoise, kLabelFlip, kLie };
  Kind kind = Kind::kNone;
  double value = 0;  // scale: k; noise: sigma; lie: z (0: LieZ(n, f), which the caller sets)
};

// "none", "sign-flip", "label-flip", "scale:<k>" (finite, k != 1), "noise:<sigma>" (finite,
// > 0), "lie" or "lie:<z>" (finite, > 0); the error names the spec and what is wrong.
Result<AttackSpec> ParseAttackSpec(std::string_view spec);
std::string ToString(const AttackSpec& spec);

// The labels y -> num_classes - 1 - y, in place (label-flip's attackers train on these).
void FlipLabels(std::span<uint8_t> labels, int num_classes);

// Phi^-1(p), the standard normal quantile, for p in (0, 1) (to double precision).
double InverseNormalCdf(double p);

// The paper's z_max for n workers of which f collude: the attackers need s = floor(n/2 + 1) - f
// honest "supporters" whose values lie farther from the mean than theirs, so that they sit
// in the majority a median or Krum picks from; with normally distributed honest values that
// holds for z up to Phi^-1((n - s) / n). E.g. n 10, f 2: s 4, z = Phi^-1(0.6) = 0.2533.
// An error when 1 <= f < n does not hold or s < 1 (the attackers are a majority already:
// z_max is unbounded, give one with lie:<z>).
Result<double> LieZ(int n, int f);

// out[i] = mean_k models[k][i] - z * std_k models[k][i], the sample standard deviation (k - 1
// in the denominator, as torch.std has it), over at least two honest models trained from one
// global model g. Computed on the models themselves: the deltas models[k] - g have the same
// std and their mean is shifted by g, so g + mean(delta) - z std(delta) is this.
void LittleIsEnough(std::span<const std::span<const float>> models, double z, std::span<float> out);

// Rewrites `trained` (same length as `global`); noise draws from `seed`; label-flip and lie
// leave it (lie needs the other attackers' models: LittleIsEnough).
void ApplyAttack(const AttackSpec& spec, std::span<const float> global, std::span<float> trained,
                 uint64_t seed);

}  // namespace shoal::client
