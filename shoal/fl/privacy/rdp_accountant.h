// The privacy accountant of a DP FL job: Rényi DP of the sampled Gaussian mechanism (Mironov
// 2017; Mironov, Talwar, Zhang 2019), composed over the job's versions and converted to (ε, δ).
// The same computation and orders as Opacus's RDPAccountant (opacus/accountants/analysis/rdp.py,
// itself TF Privacy's), so that a job's ε can be checked against it.
#pragma once

#include <cstdint>
#include <vector>

namespace shoal::privacy {

// Opacus's RDPAccountant.DEFAULT_ALPHAS: 1.1, 1.2, ..., 10.9, then 12, 13, ..., 63.
const std::vector<double>& DefaultRdpOrders();

// RDP of one step of the sampled Gaussian mechanism (sampling rate q, noise multiplier sigma)
// at order `alpha` (> 1); +inf where sigma is 0 and q > 0.
double SampledGaussianRdp(double q, double sigma, double alpha);

struct PrivacySpent {
  double epsilon = 0;  // +inf: no privacy (sigma 0)
  double order = 0;    // the order that gave it (0: nothing spent)
};

// ε at `delta` from RDP values at `orders` (Balle et al. 2020, Theorem 21; Opacus's
// get_privacy_spent): min over the orders of rdp - (log δ + log α)/(α - 1) + log((α - 1)/α).
PrivacySpent RdpToEpsilon(const std::vector<double>& orders, const std::vector<double>& rdp,
                          double delta);

// Steps of the mechanism in order; consecutive steps with the same (q, sigma) are one run, as
// Opacus keeps its history (so the composition is computed the same way: rdp(q, σ) * steps).
class RdpAccountant {
 public:
  struct Run {
    double q = 0, sigma = 0;
    uint64_t steps = 0;
  };
  void Step(double q, double sigma);
  // (ε, order) at delta after every step so far; {0, 0} before the first.
  PrivacySpent Spent(double delta) const;
  // What Spent would be after one more step (q, sigma): the budget check before a commit.
  PrivacySpent SpentAfter(double q, double sigma, double delta) const;
  const std::vector<Run>& runs() const { return runs_; }
  void Restore(std::vector<Run> runs) { runs_ = std::move(runs); }

 private:
  static PrivacySpent SpentOf(const std::vector<Run>& runs, double delta);
  std::vector<Run> runs_;
};

}  // namespace shoal::privacy
