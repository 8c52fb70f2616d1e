#include "shoal/tools/simulator/cold_start_model.h"

namespace shoal {

// Defaults, approximated from "Serverless Cold Starts and Where to Find Them" (EuroSys 2025):
// cold starts reach ~7 s and the long ones are dominated by code/dependency deployment and
// scheduling, while pod allocation reaches ~3 s. Each component is a lognormal whose median is
// sub-second and whose p99 (median * e^(2.33 sigma)) lands near those maxima: pod allocation
// p99 ~3 s, deployment p99 ~6 s, scheduling p99 ~3 s. These are shape-level approximations of
// the paper's figures, not fitted values; replace them with a fit to your own traces.
ColdStartModel ColdStartModel::Default() {
  ColdStartModel m;
  m.pod_allocation = Distribution::LogNormal(0.45, 0.8);
  m.deployment = Distribution::LogNormal(0.8, 0.9);
  m.scheduling = Distribution::LogNormal(0.3, 1.0);
  return m;
}

ColdStartModel ColdStartModel::Fixed(double seconds) {
  ColdStartModel m;
  m.pod_allocation = Distribution::Constant(seconds);
  return m;
}

ColdStartBreakdown ColdStartModel::Sample(std::mt19937_64& rng, bool code_cached) const {
  ColdStartBreakdown b;
  b.pod_allocation_s = pod_allocation.Sample(rng);
  b.deployment_s = code_cached ? 0.0 : deployment.Sample(rng);
  b.scheduling_s = scheduling.Sample(rng);
  return b;
}

double ColdStartModel::Mean(bool code_cached) const {
  return pod_allocation.Mean() + (code_cached ? 0.0 : deployment.Mean()) + scheduling.Mean();
}

}  // namespace shoal
