// Cost of starting an instance, split into the components that "Serverless Cold Starts and
// Where to Find Them" (Joosen et al., EuroSys 2025, Huawei Cloud traces) measures: pod
// allocation, code and dependency deployment, and scheduling. Code already cached on the node
// skips deployment.
#pragma once

#include <random>

#include "shoal/tools/simulator/distribution.h"

namespace shoal {

struct ColdStartBreakdown {
  double pod_allocation_s = 0;
  double deployment_s = 0;
  double scheduling_s = 0;
  double total_s() const { return pod_allocation_s + deployment_s + scheduling_s; }
};

struct ColdStartModel {
  Distribution pod_allocation;
  Distribution deployment;  // code and dependency deployment
  Distribution scheduling;

  // The defaults, written once (see cold_start_model.cc for where the numbers come from).
  static ColdStartModel Default();
  // Every cold start costs exactly `seconds` (all of it in pod allocation, so cached code does
  // not change it): for tests and closed-form checks.
  static ColdStartModel Fixed(double seconds);
  // No cold-start cost at all.
  static ColdStartModel None() { return Fixed(0); }

  ColdStartBreakdown Sample(std::mt19937_64& rng, bool code_cached) const;
  double Mean(bool code_cached) const;
};

}  // namespace shoal
