// ε of the sampled Gaussian mechanism by Shoal's accountant, for the Opacus comparison
// (opacus_accountant_test.py). Each input line is one job: runs "q sigma steps" separated by
// ';', then '|' and delta; the output line is ε (%.17g) and the order that gave it.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "shoal/fl/privacy/rdp_accountant.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const size_t bar = line.find('|');
    if (bar == std::string::npos) return 2;
    const double delta = std::stod(line.substr(bar + 1));
    shoal::privacy::RdpAccountant acc;
    std::istringstream runs(line.substr(0, bar));
    std::string run;
    while (std::getline(runs, run, ';')) {
      std::istringstream r(run);
      double q = 0, sigma = 0;
      unsigned long long steps = 0;
      if (!(r >> q >> sigma >> steps)) return 2;
      for (unsigned long long i = 0; i < steps; ++i) acc.Step(q, sigma);
    }
    const auto spent = acc.Spent(delta);
    std::printf("%.17g %.17g\n", spent.epsilon, spent.order);
  }
  return 0;
}
