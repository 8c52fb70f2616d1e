// Model-poisoning attacks a simulated client can mount (shoal-client --attack), to show what a
// job's robust rule (spec.aggregation.robust) withstands. Each rewrites the trained model x
// from the global model g it started from, through its delta x - g:
//   sign-flip     x <- g - (x - g)          (the delta reversed)
//   scale:<k>     x <- g + k (x - g)        (scale:-10 is the "scaled x-10")
//   noise:<sigma> x <- g + N(0, sigma^2)    (the delta replaced by Gaussian noise)
// NaN updates need no attack mode: the leaves refuse non-finite values (400).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::client {

struct AttackSpec {
  enum class Kind { kNone, kSignFlip, kScale, kNoise };
  Kind kind = Kind::kNone;
  double value = 0;  // scale: k; noise: sigma
};

// "none", "sign-flip", "scale:<k>" (finite, k != 1), "noise:<sigma>" (finite, > 0); the error
// names the spec and what is wrong.
Result<AttackSpec> ParseAttackSpec(std::string_view spec);
std::string ToString(const AttackSpec& spec);

// Rewrites `trained` (same length as `global`); noise draws from `seed`.
void ApplyAttack(const AttackSpec& spec, std::span<const float> global, std::span<float> trained,
                 uint64_t seed);

}  // namespace shoal::client
