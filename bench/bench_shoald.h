// Starting the real shoald a bench measures (tests/support's Shoald) and deploying the echo
// function the wrk benches load, saying on stderr why when either fails.
#pragma once

#include <cstdio>

#include "tests/support/shoald_fixture.h"

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

// The builtin echo, one instance taking up to 1024 requests at a time (wrk's connections),
// deployed and ready.
inline bool DeployEcho(testing::Shoald& shoald) {
  auto d = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\nspec:\n  handler:\n"
      "    builtin: echo\n  concurrency: 1024\n  scale: {min: 1, max: 1}\n");
  if (d.exit_code == 0 && shoald.WaitReady("echo", 1)) return true;
  std::fprintf(stderr, "deploy echo failed: %s\n", d.err.c_str());
  return false;
}

}  // namespace shoal::bench
