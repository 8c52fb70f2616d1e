#include "shoal/fl/privacy/local_dp.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace shoal::privacy {

Status CheckLocalDp(const LocalDpOptions& o, std::string_view flag_prefix) {
  const std::string p(flag_prefix);
  if (!(o.clip > 0) || !std::isfinite(o.clip)) {
    return InvalidArgument(p + "clip: must be a finite number > 0, got " + std::to_string(o.clip));
  }
  if (!(o.noise_multiplier >= 0) || !std::isfinite(o.noise_multiplier)) {
    return InvalidArgument(p + "noise: must be a finite number >= 0, got " +
                           std::to_string(o.noise_multiplier));
  }
  return Status::Ok();
}

Result<double> PrivatizeUpdate(std::span<const float> global, std::span<float> trained,
                               const LocalDpOptions& o, GaussianNoise& noise) {
  if (global.size() != trained.size()) {
    return InvalidArgument("local DP: the update has " + std::to_string(trained.size()) +
                           " values, the global model " + std::to_string(global.size()));
  }
  double sq = 0;
  for (size_t i = 0; i < trained.size(); ++i) {
    const double d = static_cast<double>(trained[i]) - static_cast<double>(global[i]);
    sq += d * d;
  }
  const double norm = std::sqrt(sq);
  const double scale = norm > 0 ? std::min(1.0, o.clip / norm) : 1.0;
  const double stddev = o.noise_multiplier * o.clip;
  for (size_t i = 0; i < trained.size(); ++i) {
    double d = (static_cast<double>(trained[i]) - static_cast<double>(global[i])) * scale;
    if (stddev > 0) d += noise.Normal() * stddev;
    trained[i] = static_cast<float>(static_cast<double>(global[i]) + d);
  }
  return norm;
}

}  // namespace shoal::privacy
