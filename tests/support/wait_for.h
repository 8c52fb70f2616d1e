// Waiting in tests for something another thread or process does: the one polling loop.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace shoal::testing {

// Calls `done` every `every` until it returns true or `timeout` has passed; returns its last
// answer (so a condition that became true at the deadline still counts).
inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                    std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(every);
  }
  return done();
}

}  // namespace shoal::testing
