// Tests that load something from many threads at once: the threads and their joining, once.
#pragma once

#include <functional>
#include <thread>
#include <vector>

namespace shoal::testing {

// `n` threads running fn(0) .. fn(n - 1), started at construction; Join (or the destructor)
// waits for them all.
class Threads {
 public:
  Threads(int n, const std::function<void(int)>& fn) {
    threads_.reserve(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) threads_.emplace_back(fn, t);
  }
  ~Threads() { Join(); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

  void Join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::vector<std::thread> threads_;
};

}  // namespace shoal::testing
