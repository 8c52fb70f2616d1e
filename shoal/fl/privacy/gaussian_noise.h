// Gaussian noise for central and local DP: N(0, stddev^2) added to each of a vector's values,
// from xoshiro256** seeded with 256 bits of the kernel's CSPRNG (getrandom), so that no two
// processes or commits draw the same noise and nothing a client sees predicts it. A fixed seed
// exists for tests only (Seeded, and the coordinator's SHOAL_DP_TEST_SEED hook).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "shoal/common/status.h"

namespace shoal::privacy {

class GaussianNoise {
 public:
  // Seeded from getrandom(2); an error only where the kernel refuses it.
  static Result<GaussianNoise> FromCsprng();
  // A fixed seed: tests only (the same seed draws the same noise).
  static GaussianNoise Seeded(uint64_t seed);

  // x[i] += N(0, stddev^2) for i < n (float32: the model's dtype; drawn in double).
  void Add(float* x, size_t n, double stddev);
  // One draw of N(0, 1).
  double Normal();

 private:
  explicit GaussianNoise(const std::array<uint64_t, 4>& s) : s_(s) {}
  uint64_t Next();
  double Uniform01();  // (0, 1]: log() of it is finite
  std::array<uint64_t, 4> s_;
  bool have_spare_ = false;
  double spare_ = 0;
};

}  // namespace shoal::privacy
