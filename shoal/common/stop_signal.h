// How a component tells the thread(s) it owns to finish: the stop flag they wait for is set
// under their mutex and every waiter is woken; the caller then joins them.
#pragma once

#include <condition_variable>
#include <mutex>

namespace shoal {

// Sets `stop` under `mu` and wakes every waiter on `cv`. Returns whether this call set it
// (false, and nothing done: it was set already).
inline bool SignalStop(std::mutex& mu, bool& stop, std::condition_variable& cv) {
  {
    std::lock_guard lock(mu);
    if (stop) return false;
    stop = true;
  }
  cv.notify_all();
  return true;
}

}  // namespace shoal
