// The spread of one figure over a bench's repeated runs (min/median/max), printed beside the
// median that its RESULT line reports: a single run on a shared VM says little on its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace shoal::bench {

struct Spread {
  double min = NAN;
  double median = NAN;
  double max = NAN;
};

// NaNs (a run whose figure is missing) are left out; all NaN gives all NaN.
inline Spread SpreadOf(std::vector<double> v) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
  return s;
}

// The median (the mean of the middle two for an even count); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The q-quantile (q in [0, 1]) by nearest rank: the sorted values' element at round(q (n - 1)); 0
// for none.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1,
                    static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace shoal::bench
