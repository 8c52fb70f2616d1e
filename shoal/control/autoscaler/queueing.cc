#include "shoal/control/autoscaler/queueing.h"

#include <cmath>
#include <limits>

namespace shoal {
namespace {

// Erlang B by its stable recurrence, B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1)).
double ErlangB(uint32_t n, double a) {
  double b = 1;
  for (uint32_t k = 1; k <= n; ++k) b = a * b / (k + a * b);
  return b;
}

double ErlangCFromB(uint32_t n, double a, double b) {
  if (static_cast<double>(n) <= a) return 1;
  return n * b / (n - a * (1 - b));
}

}  // namespace

double ErlangC(uint32_t n, double a) {
  if (a <= 0) return 0;
  if (n == 0) return 1;
  return ErlangCFromB(n, a, ErlangB(n, a));
}

double MeanQueueWait(uint32_t n, double lambda, double service_s) {
  if (lambda <= 0) return 0;
  const double mu = 1 / service_s;
  if (n * mu <= lambda) return std::numeric_limits<double>::infinity();
  return ErlangC(n, lambda * service_s) / (n * mu - lambda);
}

uint32_t MinServersForWaitProbability(double a, double p_wait, uint32_t cap) {
  if (a <= 0) return 0;
  double b = 1;  // Erlang B carried along n so the search is linear overall
  for (uint32_t n = 1; n <= cap; ++n) {
    b = a * b / (n + a * b);
    if (ErlangCFromB(n, a, b) < p_wait) return n;
  }
  return cap;
}

uint32_t MinServersForMeanWait(double lambda, double service_s, double max_wait_s,
                               double max_utilization, uint32_t cap) {
  if (lambda <= 0) return 0;
  const double a = lambda * service_s;
  const double mu = 1 / service_s;
  double b = 1;
  for (uint32_t n = 1; n <= cap; ++n) {
    b = a * b / (n + a * b);
    if (a / n > max_utilization) continue;
    const double wait = ErlangCFromB(n, a, b) / (n * mu - lambda);
    if (wait <= max_wait_s) return n;
  }
  return cap;
}

}  // namespace shoal
