#include "shoal/tools/flsim/attack.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "shoal/fl/client/spec_number.h"

namespace shoal::client {

Result<AttackSpec> ParseAttackSpec(std::string_view spec) {
  const auto [kind, arg, has_arg, where] = internal::SplitSpec(spec, "attack");
  AttackSpec a;
  if (kind == "none" || kind == "sign-flip" || kind == "label-flip") {
    if (has_arg) {
      return InvalidArgument(where + std::string(kind) + " takes no argument");
    }
    a.kind = kind == "none"        ? AttackSpec::Kind::kNone
             : kind == "sign-flip" ? AttackSpec::Kind::kSignFlip
                                   : AttackSpec::Kind::kLabelFlip;
    return a;
  }
  if (kind == "lie" && !has_arg) {
    a.kind = AttackSpec::Kind::kLie;  // z from LieZ(n, f)
    return a;
  }
  if (kind != "scale" && kind != "noise" && kind != "lie") {
    return InvalidArgument(where +
                           "unknown attack (none, sign-flip, label-flip, scale:<k>, "
                           "noise:<sigma>, lie[:<z>])");
  }
  const auto v = internal::ParseDouble(arg);
  if (!v || !std::isfinite(*v)) {
    return InvalidArgument(where + std::string(kind) + " needs a finite number, e.g. " +
                           (kind == "scale"   ? "scale:-10"
                            : kind == "noise" ? "noise:0.5"
                                              : "lie:1.5"));
  }
  if (kind == "scale") {
    if (*v == 1) return InvalidArgument(where + "scale:1 changes nothing");
    a.kind = AttackSpec::Kind::kScale;
  } else if (kind == "lie") {
    if (!(*v > 0)) return InvalidArgument(where + "z must be > 0");
    a.kind = AttackSpec::Kind::kLie;
  } else {
    if (!(*v > 0)) return InvalidArgument(where + "sigma must be > 0");
    a.kind = AttackSpec::Kind::kNoise;
  }
  a.value = *v;
  return a;
}

std::string ToString(const AttackSpec& a) {
  char buf[64];
  switch (a.kind) {
    case AttackSpec::Kind::kNone:
      return "none";
    case AttackSpec::Kind::kSignFlip:
      return "sign-flip";
    case AttackSpec::Kind::kLabelFlip:
      return "label-flip";
    case AttackSpec::Kind::kScale:
      std::snprintf(buf, sizeof buf, "scale:%g", a.value);
      return buf;
    case AttackSpec::Kind::kNoise:
      std::snprintf(buf, sizeof buf, "noise:%g", a.value);
      return buf;
    case AttackSpec::Kind::kLie:
      if (a.value == 0) return "lie";
      std::snprintf(buf, sizeof buf, "lie:%g", a.value);
      return buf;
  }
  return "?";
}

void FlipLabels(std::span<uint8_t> labels, int num_classes) {
  for (uint8_t& y : labels) y = static_cast<uint8_t>(num_classes - 1 - y);
}

double InverseNormalCdf(double p) {
  // Bisection on Phi(z) = erfc(-z / sqrt 2) / 2, monotone: 200 halvings of [-40, 40] leave an
  // interval below double spacing, so this is Phi^-1 to the last bit erfc gives.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && lo < hi; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid == lo || mid == hi) break;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return lo + (hi - lo) / 2;
}

Result<double> LieZ(int n, int f) {
  if (n < 2 || f < 1 || f >= n) {
    return InvalidArgument("lie: z_max needs 1 <= attackers < clients (got " + std::to_string(f) +
                           " of " + std::to_string(n) + ")");
  }
  const int s = n / 2 + 1 - f;  // floor(n/2 + 1) - f supporters
  if (s < 1) {
    return InvalidArgument("lie: " + std::to_string(f) + " attackers of " + std::to_string(n) +
                           " clients need no supporters (s = floor(n/2 + 1) - f = " +
                           std::to_string(s) + "): z_max is unbounded, give one as lie:<z>");
  }
  return InverseNormalCdf(static_cast<double>(n - s) / n);
}

void LittleIsEnough(std::span<const std::span<const float>> models, double z,
                    std::span<float> out) {
  const size_t k = models.size();
  if (k < 2) return;
  const double inv_k = 1.0 / static_cast<double>(k);
  const double inv_k1 = 1.0 / static_cast<double>(k - 1);
  for (size_t i = 0; i < out.size(); ++i) {
    double mean = 0;
    for (const auto& m : models) mean += m[i];
    mean *= inv_k;
    double ss = 0;
    for (const auto& m : models) ss += (m[i] - mean) * (m[i] - mean);
    out[i] = static_cast<float>(mean - z * std::sqrt(ss * inv_k1));
  }
}

void ApplyAttack(const AttackSpec& a, std::span<const float> global, std::span<float> trained,
                 uint64_t seed) {
  const size_t n = std::min(global.size(), trained.size());
  switch (a.kind) {
    case AttackSpec::Kind::kNone:
    case AttackSpec::Kind::kLabelFlip:  // the data did it
    case AttackSpec::Kind::kLie:        // the colluders' pool does it (LittleIsEnough)
      return;
    case AttackSpec::Kind::kSignFlip:
      for (size_t i = 0; i < n; ++i) trained[i] = 2 * global[i] - trained[i];
      return;
    case AttackSpec::Kind::kScale: {
      const auto k = static_cast<float>(a.value);
      for (size_t i = 0; i < n; ++i) trained[i] = global[i] + k * (trained[i] - global[i]);
      return;
    }
    case AttackSpec::Kind::kNoise: {
      std::mt19937_64 rng(seed);
      std::normal_distribution<float> d(0.0f, static_cast<float>(a.value));
      for (size_t i = 0; i < n; ++i) trained[i] = global[i] + d(rng);
      return;
    }
  }
}

}  // namespace shoal::client
