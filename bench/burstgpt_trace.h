// A BurstGPT-shaped request stream for a language model, generated from a seed (no download: the
// parameters are here). BurstGPT (Wang et al., "BurstGPT: A Real-World Workload Dataset to
// Optimize LLM Serving Systems", arXiv 2401.17644; github.com/HPMLL/BurstGPT) traces Azure
// OpenAI's ChatGPT and GPT-4 services; its benchmark (BurstGPT-Perf) models the arrivals as a
// Gamma process whose burstiness varies over time and the request and response token lengths
// as Zipf distributions. This generator follows that shape:
//   - Arrivals: bursts whose starts are Gamma inter-arrivals with shape 0.5 (coefficient of
//     variation 1.41: burstier than Poisson, as BurstGPT's API arrivals are), mean gap
//     `burst_gap_s`; each burst has a Zipf(1.5)-distributed number of requests on 1..24
//     (mean ~3.4), spaced by Gamma(shape 0.5) gaps of mean `within_gap_s`. Several bursts can
//     overlap. The exponents and shapes are this generator's choices in BurstGPT's families,
//     not fitted values from its trace (not checked here).
//   - Lengths: BurstGPT's ChatGPT requests are typically hundreds to ~2,000 tokens and responses
//     tens to ~1,000; the model's context is 128 bytes (one byte = one token). Prompts are
//     Zipf(0.7) over 1..2,048 trace tokens, responses Zipf(0.7) over 1..1,024, each divided by 16
//     (rounded up) onto bytes: prompts 1..128 -> capped to 8..96, responses 1..64 -> capped to
//     4..64 and to what the context leaves (prompt + response <= 127). Resulting means: prompts
//     ~33 bytes (median ~17), responses ~18 tokens (median ~9, p90 ~47).
// Zipf(s) over 1..n: P(k) proportional to k^-s (inverse CDF over the precomputed weights).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace shoal::bench {

struct LmRequest {
  double t = 0;  // seconds from the start
  int prompt_bytes = 0;
  int max_tokens = 0;
};

class Zipf {
 public:
  Zipf(double s, int n) : cdf_(static_cast<size_t>(n)) {
    double sum = 0;
    for (int k = 1; k <= n; ++k) cdf_[static_cast<size_t>(k - 1)] = sum += std::pow(k, -s);
    for (double& c : cdf_) c /= sum;
  }
  template <class Rng>
  int operator()(Rng& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()) + 1;
  }

 private:
  std::vector<double> cdf_;
};

struct BurstGptShape {
  double burst_gap_s = 4;     // mean gap between burst starts
  double within_gap_s = 0.3;  // mean gap between requests of a burst
  int max_burst = 24;
  int n_ctx = 128;
};

inline std::vector<LmRequest> BurstGptTrace(const BurstGptShape& shape, double seconds,
                                            uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Gamma(k, theta) has mean k * theta: shape 0.5, scale = 2 x the mean.
  std::gamma_distribution<double> burst_gap(0.5, 2 * shape.burst_gap_s);
  std::gamma_distribution<double> within_gap(0.5, 2 * shape.within_gap_s);
  Zipf burst_size(1.5, shape.max_burst), prompt_tokens(0.7, 2048), response_tokens(0.7, 1024);
  std::vector<LmRequest> out;
  for (double start = burst_gap(rng); start < seconds; start += burst_gap(rng)) {
    const int n = burst_size(rng);
    double t = start;
    for (int i = 0; i < n && t < seconds; ++i, t += within_gap(rng)) {
      LmRequest r;
      r.t = t;
      r.prompt_bytes = std::clamp((prompt_tokens(rng) + 15) / 16, 8, 96);
      r.max_tokens = std::clamp((response_tokens(rng) + 15) / 16, 4, 64);
      r.max_tokens = std::min(r.max_tokens, shape.n_ctx - 1 - r.prompt_bytes);
      out.push_back(r);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const LmRequest& a, const LmRequest& b) { return a.t < b.t; });
  return out;
}

}  // namespace shoal::bench
