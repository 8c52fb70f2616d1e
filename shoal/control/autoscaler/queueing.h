// M/M/c formulas used to size replicas: Erlang C (probability that an arrival waits) and the
// mean queue wait, and the smallest server count meeting a bound on either.
#pragma once

#include <cstdint>

namespace shoal {

// P(wait) in an M/M/n queue offered `a` = lambda * mean service (Erlangs); 1 when n <= a.
double ErlangC(uint32_t n, double a);
// Mean time in queue, C(n, a) / (n * mu - lambda); infinite when n * mu <= lambda.
double MeanQueueWait(uint32_t n, double lambda, double service_s);
// Smallest n with ErlangC(n, a) < p_wait (at most `cap`; returns cap when none below it does).
uint32_t MinServersForWaitProbability(double a, double p_wait, uint32_t cap = 1u << 20);
// Smallest n with MeanQueueWait <= max_wait_s and lambda * service / n <= max_utilization.
uint32_t MinServersForMeanWait(double lambda, double service_s, double max_wait_s,
                               double max_utilization, uint32_t cap = 1u << 20);

}  // namespace shoal
