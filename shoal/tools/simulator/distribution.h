// Random distributions for the simulator: service times, cold-start components, jitter.
// Sampling is written out here (not std::*_distribution) so a seed gives the same numbers with
// any standard library.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace shoal {

// A double in [0, 1) from the top 53 bits of one draw.
inline double UniformUnit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}
double StandardNormal(std::mt19937_64& rng);
// Gamma(shape, scale) by Marsaglia and Tsang (shape < 1 boosted by U^(1/shape)).
double SampleGamma(std::mt19937_64& rng, double shape, double scale);

class Distribution {
 public:
  enum class Kind { kConstant, kUniform, kExponential, kLogNormal, kEmpirical };

  Distribution() = default;  // constant 0
  static Distribution Constant(double value);
  static Distribution Uniform(double lo, double hi);
  static Distribution Exponential(double mean);
  // Parameterised the way latency papers report it: the median and the sigma of ln(x).
  static Distribution LogNormal(double median, double sigma);
  // Draws one of the given observations uniformly (an empty list behaves as constant 0).
  static Distribution Empirical(std::vector<double> samples);

  double Sample(std::mt19937_64& rng) const;
  double Mean() const;
  Kind kind() const { return kind_; }

 private:
  Distribution(Kind kind, double a, double b = 0) : kind_(kind), a_(a), b_(b) {}

  Kind kind_ = Kind::kConstant;
  double a_ = 0;
  double b_ = 0;
  std::shared_ptr<const std::vector<double>> samples_;
};

}  // namespace shoal
