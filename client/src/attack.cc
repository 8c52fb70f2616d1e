#include "shoal/client/attack.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "spec_number.h"

namespace shoal::client {

Result<AttackSpec> ParseAttackSpec(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  const std::string where = "attack \"" + std::string(spec) + "\": ";
  AttackSpec a;
  if (kind == "none" || kind == "sign-flip" || kind == "label-flip") {
    if (colon != std::string_view::npos) {
      return InvalidArgument(where + std::string(kind) + " takes no argument");
    }
    a.kind = kind == "none"        ? AttackSpec::Kind::kNone
             : kind == "sign-flip" ? AttackSpec::Kind::kSignFlip
                                   : AttackSpec::Kind::kLabelFlip;
    return a;
  }
  if (kind != "scale" && kind != "noise") {
    return InvalidArgument(where +
                           "unknown attack (none, sign-flip, label-flip, scale:<k>, noise:<sigma>)");
  }
  const auto v = internal::ParseDouble(arg);
  if (!v || !std::isfinite(*v)) {
    return InvalidArgument(where + std::string(kind) + " needs a finite number, e.g. " +
                           (kind == "scale" ? "scale:-10" : "noise:0.5"));
  }
  if (kind == "scale") {
    if (*v == 1) return InvalidArgument(where + "scale:1 changes nothing");
    a.kind = AttackSpec::Kind::kScale;
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
  }
  return "?";
}

void FlipLabels(std::span<uint8_t> labels, int num_classes) {
  for (uint8_t& y : labels) y = static_cast<uint8_t>(num_classes - 1 - y);
}

void ApplyAttack(const AttackSpec& a, std::span<const float> global, std::span<float> trained,
                 uint64_t seed) {
  const size_t n = std::min(global.size(), trained.size());
  switch (a.kind) {
    case AttackSpec::Kind::kNone:
    case AttackSpec::Kind::kLabelFlip:  // the data did it
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
