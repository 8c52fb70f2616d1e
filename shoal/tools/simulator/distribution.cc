#include "shoal/tools/simulator/distribution.h"

#include <cmath>
#include <numbers>
#include <numeric>
#include <utility>

namespace shoal {

double StandardNormal(std::mt19937_64& rng) {
  // Box-Muller; one value per call keeps the generator's state the only state.
  const double u1 = 1.0 - UniformUnit(rng);  // (0, 1]
  const double u2 = UniformUnit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double SampleGamma(std::mt19937_64& rng, double shape, double scale) {
  if (shape <= 0) return 0;
  if (shape < 1) {
    const double u = 1.0 - UniformUnit(rng);
    return SampleGamma(rng, shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = StandardNormal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - UniformUnit(rng);
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

Distribution Distribution::Constant(double value) { return {Kind::kConstant, value}; }

Distribution Distribution::Uniform(double lo, double hi) { return {Kind::kUniform, lo, hi}; }

Distribution Distribution::Exponential(double mean) { return {Kind::kExponential, mean}; }

Distribution Distribution::LogNormal(double median, double sigma) {
  return {Kind::kLogNormal, std::log(median), sigma};
}

Distribution Distribution::Empirical(std::vector<double> samples) {
  if (samples.empty()) return Constant(0);
  Distribution d(Kind::kEmpirical,
                 std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size());
  d.samples_ = std::make_shared<const std::vector<double>>(std::move(samples));
  return d;
}

double Distribution::Sample(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kConstant:
      return a_;
    case Kind::kUniform:
      return a_ + (b_ - a_) * UniformUnit(rng);
    case Kind::kExponential:
      return -a_ * std::log(1.0 - UniformUnit(rng));
    case Kind::kLogNormal:
      return std::exp(a_ + b_ * StandardNormal(rng));
    case Kind::kEmpirical: {
      const auto& s = *samples_;
      return s[static_cast<size_t>(UniformUnit(rng) * s.size())];
    }
  }
  return 0;
}

double Distribution::Mean() const {
  switch (kind_) {
    case Kind::kConstant:
    case Kind::kExponential:
    case Kind::kEmpirical:
      return a_;
    case Kind::kUniform:
      return 0.5 * (a_ + b_);
    case Kind::kLogNormal:
      return std::exp(a_ + 0.5 * b_ * b_);
  }
  return 0;
}

}  // namespace shoal
