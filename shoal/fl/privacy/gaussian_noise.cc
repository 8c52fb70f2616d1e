#include "shoal/fl/privacy/gaussian_noise.h"

#include <sys/random.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

namespace shoal::privacy {

namespace {
uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// SplitMix64: spreads one 64-bit test seed over xoshiro's 256 bits of state.
uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

Result<GaussianNoise> GaussianNoise::FromCsprng() {
  std::array<uint64_t, 4> s{};
  size_t got = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(s.data());
  while (got < sizeof s) {
    const ssize_t r = getrandom(bytes + got, sizeof s - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Internal(std::string("getrandom for the DP noise's seed: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;  // xoshiro's one bad state
  return GaussianNoise(s);
}

GaussianNoise GaussianNoise::Seeded(uint64_t seed) {
  std::array<uint64_t, 4> s{};
  for (uint64_t& w : s) w = SplitMix(seed);
  return GaussianNoise(s);
}

uint64_t GaussianNoise::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double GaussianNoise::Uniform01() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }

// Box-Muller, both outputs used.
double GaussianNoise::Normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  const double r = std::sqrt(-2.0 * std::log(Uniform01()));
  const double theta = 2.0 * M_PI * Uniform01();
  spare_ = r * std::sin(theta);
  have_spare_ = true;
  return r * std::cos(theta);
}

void GaussianNoise::Add(float* x, size_t n, double stddev) {
  if (stddev == 0) return;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] + stddev * Normal());
}

}  // namespace shoal::privacy
