// Model-poisoning attacks a simulated client can mount (shoal-client --attack), to show what a
// job's robust rule (spec.aggregation.robust) withstands. Each rewrites the trained model x
// from the global model g it started from, through its delta x - g:
//   sign-flip     x <- g - (x - g)          (the delta reversed)
//   scale:<k>     x <- g + k (x - g)        (scale:-10 is the "scaled x-10")
//   noise:<sigma> x <- g + N(0, sigma^2)    (the delta replaced by Gaussian noise)
//   label-flip    trained on its data with every label y replaced by C - 1 - y (a data
//                 poisoning attack: the update itself is sent as trained; FlipLabels)
// NaN updates need no attack mode: the leaves refuse non-finite values (400).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::client {

struct AttackSpec {
  enum class Kind { kNone, kSignFlip, kScale, kNoise, kLabelFlip };
  Kind kind = Kind::kNone;
  double value = 0;  // scale: k; noise: sigma
};

// "none", "sign-flip", "label-flip", "scale:<k>" (finite, k != 1), "noise:<sigma>" (finite,
// > 0); the error names the spec and what is wrong.
Result<AttackSpec> ParseAttackSpec(std::string_view spec);
std::string ToString(const AttackSpec& spec);

// The labels y -> num_classes - 1 - y, in place (label-flip's attackers train on these).
void FlipLabels(std::span<uint8_t> labels, int num_classes);

// Rewrites `trained` (same length as `global`); noise draws from `seed`; label-flip leaves it.
void ApplyAttack(const AttackSpec& spec, std::span<const float> global, std::span<float> trained,
                 uint64_t seed);

}  // namespace shoal::client
