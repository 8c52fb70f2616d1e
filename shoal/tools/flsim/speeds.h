// Heterogeneous simulated clients: each client's training time per local step, drawn once
// from a named distribution ("lognormal:1.0", "exponential:0.05", "normal:0.05,0.02",
// "uniform"), deterministic from a seed. All values are seconds per local step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::client {

// The step time of the median client when a spec does not say (seconds per local step).
inline constexpr double kDefaultStepSeconds = 0.05;

struct SpeedSpec {
  enum class Kind { kUniform, kLognormal, kExponential, kNormal };
  Kind kind = Kind::kUniform;
  // kUniform: [a, b] (a == b: every client the same); kLognormal: sigma = a, median = b;
  // kExponential: mean = a; kNormal: mean = a, sd = b.
  double a = kDefaultStepSeconds;
  double b = kDefaultStepSeconds;
};

// "uniform" | "uniform:<lo>,<hi>" | "lognormal:<sigma>[,<median>]" | "exponential:<mean>" |
// "normal:<mean>,<sd>". Errors name the bad part.
Result<SpeedSpec> ParseSpeedSpec(std::string_view spec);
std::string ToString(const SpeedSpec& spec);

// Normal and exponential draws are clamped up to this fraction of the mean, so no client is
// infinitely fast.
inline constexpr double kMinStepFraction = 0.05;

// Seconds per local step for each of `num_clients` clients.
std::vector<double> SampleStepSeconds(const SpeedSpec& spec, int num_clients, uint64_t seed);

}  // namespace shoal::client
