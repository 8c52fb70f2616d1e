#include "shoal/fl/privacy/rdp_accountant.h"

#include <cmath>
#include <limits>

namespace shoal::privacy {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(x) + exp(y)), -inf for 0 (Opacus's _log_add).
double LogAdd(double x, double y) {
  const double a = std::min(x, y), b = std::max(x, y);
  if (a == -kInf) return b;
  return std::log1p(std::exp(a - b)) + b;
}

// log(exp(x) - exp(y)) for x >= y (Opacus's _log_sub; x < y cannot occur for the terms below,
// and reads as x as Opacus's overflow branch does).
double LogSub(double x, double y) {
  if (y == -kInf) return x;
  if (x == y) return -kInf;
  if (x < y) return x;
  const double d = std::expm1(x - y);
  if (!std::isfinite(d)) return x;
  return std::log(d) + y;
}

// log(erfc(x)), accurate where erfc(x) underflows (x > 26): the asymptotic series
// erfc(x) ~ exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(2x^2)^2 - 15/(2x^2)^3 + ...).
double LogErfc(double x) {
  if (x < 20) return std::log(std::erfc(x));
  const double t = 1 / (2 * x * x);
  double term = 1, sum = 1;
  for (int k = 1; k <= 8; ++k) {
    term *= -(2 * k - 1) * t;
    sum += term;
  }
  return -x * x - std::log(x) - 0.5 * std::log(M_PI) + std::log(sum);
}

double LogBinomial(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

// log(A_alpha) for an integer alpha (Mironov et al. 2019, Section 3.3).
double LogAInt(double q, double sigma, int alpha) {
  double log_a = -kInf;
  for (int i = 0; i <= alpha; ++i) {
    const double log_coef = LogBinomial(alpha, i) + i * std::log(q) + (alpha - i) * std::log1p(-q);
    const double s = log_coef + (static_cast<double>(i) * i - i) / (2 * sigma * sigma);
    log_a = LogAdd(log_a, s);
  }
  return log_a;
}

// log(A_alpha) for a fractional alpha: the two series, until their terms fall below e^-30.
double LogAFrac(double q, double sigma, double alpha) {
  double log_a0 = -kInf, log_a1 = -kInf;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  double coef = 1;  // binom(alpha, i), built term by term (it changes sign past alpha)
  for (int i = 0;; ++i) {
    if (i > 0) coef *= (alpha - (i - 1)) / i;
    const double log_coef = std::log(std::abs(coef));
    const double j = alpha - i;
    const double log_t0 = log_coef + i * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coef + j * std::log(q) + i * std::log1p(-q);
    const double log_e0 = std::log(0.5) + LogErfc((i - z0) / (std::sqrt(2.0) * sigma));
    const double log_e1 = std::log(0.5) + LogErfc((z0 - j) / (std::sqrt(2.0) * sigma));
    const double log_s0 = log_t0 + (static_cast<double>(i) * i - i) / (2 * sigma * sigma) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * sigma * sigma) + log_e1;
    if (coef > 0) {
      log_a0 = LogAdd(log_a0, log_s0);
      log_a1 = LogAdd(log_a1, log_s1);
    } else {
      log_a0 = LogSub(log_a0, log_s0);
      log_a1 = LogSub(log_a1, log_s1);
    }
    if (std::max(log_s0, log_s1) < -30) break;
  }
  return LogAdd(log_a0, log_a1);
}

}  // namespace

const std::vector<double>& DefaultRdpOrders() {
  static const std::vector<double> orders = [] {
    std::vector<double> o;
    for (int x = 1; x < 100; ++x) o.push_back(1 + x / 10.0);
    for (int a = 12; a < 64; ++a) o.push_back(a);
    return o;
  }();
  return orders;
}

double SampledGaussianRdp(double q, double sigma, double alpha) {
  if (q == 0) return 0;
  if (sigma == 0) return kInf;
  if (q == 1.0) return alpha / (2 * sigma * sigma);
  if (std::isinf(alpha)) return kInf;
  const double log_a = alpha == std::floor(alpha) ? LogAInt(q, sigma, static_cast<int>(alpha))
                                                  : LogAFrac(q, sigma, alpha);
  return log_a / (alpha - 1);
}

PrivacySpent RdpToEpsilon(const std::vector<double>& orders, const std::vector<double>& rdp,
                          double delta) {
  PrivacySpent best{kInf, 0};
  bool any = false;
  for (size_t i = 0; i < orders.size() && i < rdp.size(); ++i) {
    const double a = orders[i];
    const double eps = rdp[i] - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a);
    if (std::isnan(eps)) continue;
    if (!any || eps < best.epsilon) best = {eps, a};
    any = true;
  }
  return best;
}

void RdpAccountant::Step(double q, double sigma) {
  if (!runs_.empty() && runs_.back().q == q && runs_.back().sigma == sigma) {
    ++runs_.back().steps;
  } else {
    runs_.push_back({q, sigma, 1});
  }
}

PrivacySpent RdpAccountant::SpentOf(const std::vector<Run>& runs, double delta) {
  if (runs.empty()) return {0, 0};
  const std::vector<double>& orders = DefaultRdpOrders();
  std::vector<double> rdp(orders.size(), 0.0);
  for (const Run& r : runs) {
    for (size_t i = 0; i < orders.size(); ++i) {
      rdp[i] += SampledGaussianRdp(r.q, r.sigma, orders[i]) * static_cast<double>(r.steps);
    }
  }
  return RdpToEpsilon(orders, rdp, delta);
}

PrivacySpent RdpAccountant::Spent(double delta) const { return SpentOf(runs_, delta); }

PrivacySpent RdpAccountant::SpentAfter(double q, double sigma, double delta) const {
  RdpAccountant next = *this;
  next.Step(q, sigma);
  return next.Spent(delta);
}

}  // namespace shoal::privacy
