// Starting the real shoald a bench measures (tests/support's Shoald), saying on stderr why when
// it does not start.
#pragma once

#include <cstdio>

#include "shoald_fixture.h"

namespace shoal::bench {

inline bool StartShoald(testing::Shoald& shoald, const testing::Shoald::Options& options = {}) {
  if (shoald.Start(options)) return true;
  std::fprintf(stderr, "shoald did not start:\n%s", shoald.Log().c_str());
  return false;
}

// The same with `loops` event loops (shoald's `threads`).
inline bool StartShoald(testing::Shoald& shoald, int loops) {
  testing::Shoald::Options options;
  options.threads = static_cast<uint32_t>(loops);
  return StartShoald(shoald, options);
}

}  // namespace shoal::bench
