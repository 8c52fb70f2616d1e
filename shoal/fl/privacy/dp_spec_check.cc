#include "shoal/fl/privacy/dp_spec_check.h"

#include <cmath>
#include <string>

#include "shoal/fl/privacy/adaptive_clip.h"

namespace shoal::privacy {

namespace {
bool Finite(double v) { return std::isfinite(v); }
std::string Num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

double CountNoiseMultiplier(const FlJobSpec& spec) {
  const FlDpSpec& d = spec.privacy.dp;
  return d.count_noise_multiplier > 0 ? d.count_noise_multiplier
                                      : DefaultCountNoiseMultiplier(spec.clients);
}

Status CheckDpSpec(const FlJobSpec& s, bool synchronous) {
  const FlDpSpec& d = s.privacy.dp;
  if (!d.enabled) return {};
  const std::string path = "spec.privacy.dp";
  if (!synchronous) {
    return InvalidArgument(path +
                           ": central DP clips each update's change from the model version a "
                           "synchronous round shares; algorithm " +
                           s.algorithm +
                           " mixes base versions, so no update's influence is bounded by the clip "
                           "(use fedavg, fedavgm or fedadam)");
  }
  if (s.robust.enabled()) {
    return InvalidArgument(path +
                           ": cannot run beside spec.aggregation.robust: the noise is calibrated "
                           "to the clipped mean's sensitivity C/n, not a robust rule's");
  }
  if (!(d.noise_multiplier >= 0) || !Finite(d.noise_multiplier)) {
    return InvalidArgument(path + ".noiseMultiplier: must be a finite number >= 0");
  }
  const std::string clip = d.adaptive ? path + ".clip.adaptive.initial" : path + ".clip.fixed";
  if (!(d.clip > 0) || !Finite(d.clip)) return InvalidArgument(clip + ": must be a number > 0");
  if (!(d.delta > 0 && d.delta < 1)) {
    return InvalidArgument(path + ".delta: must be > 0 and < 1");
  }
  if (!(d.budget >= 0) || !Finite(d.budget)) {
    return InvalidArgument(path + ".budget: must be a finite number > 0 (leave it out for none)");
  }
  if (d.adaptive) {
    const std::string a = path + ".clip.adaptive";
    if (!(d.target_quantile >= 0 && d.target_quantile <= 1)) {
      return InvalidArgument(a + ".targetQuantile: must be between 0 and 1");
    }
    if (!(d.clip_learning_rate > 0) || !Finite(d.clip_learning_rate)) {
      return InvalidArgument(a + ".learningRate: must be a finite number > 0");
    }
    if (!(d.count_noise_multiplier >= 0) || !Finite(d.count_noise_multiplier)) {
      return InvalidArgument(a + ".countNoiseMultiplier: must be a finite number > 0");
    }
    const double sb = CountNoiseMultiplier(s);
    if (d.noise_multiplier > 0 && !(2 * sb > d.noise_multiplier)) {
      return InvalidArgument(
          a + ".countNoiseMultiplier: the count's noise σ_b = " + Num(sb) +
          (d.count_noise_multiplier > 0 ? "" : " (spec.clients.expected / 20)") +
          " must exceed noiseMultiplier / 2 = " + Num(d.noise_multiplier / 2) +
          ", else it spends the whole budget and leaves no noise for the update");
    }
  }
  return {};
}

}  // namespace shoal::privacy
