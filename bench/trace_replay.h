// Replays a trace live, open loop over blocking calls: request i is handed at its due time
// (t0 + due(i) seconds) to one of `workers` threads, whatever the earlier requests are doing, so
// a server that falls behind is charged for it (measure from the due time: send(i, due)). The
// schedule's progress goes to stderr every 10 %, labelled. Returns once every request has been
// sent and answered. The live autoscaling benches (bench-autoscale-live, bench-llm-autoscale)
// replay their traces through it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shoal::bench {

// due(i): seconds from the start, non-decreasing in i; send(i, due_time) runs on a worker.
template <class Due, class Send>
void ReplayTrace(size_t n, double seconds, const std::string& label, int workers, Due due,
                 Send send) {
  using Clock = std::chrono::steady_clock;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> ready;
  bool done = false;
  const auto t0 = Clock::now();
  const auto due_time = [&](size_t i) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due(i)));
  };
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (;;) {
        size_t i;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return done || !ready.empty(); });
          if (ready.empty()) return;
          i = ready.front();
          ready.pop_front();
        }
        send(i, due_time(i));
      }
    });
  }
  size_t last_report = 0;
  for (size_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(due_time(i));
    {
      std::lock_guard lock(mu);
      ready.push_back(i);
    }
    cv.notify_one();
    const auto pct = static_cast<size_t>(100.0 * due(i) / seconds);
    if (pct >= last_report + 10) {
      last_report = pct - pct % 10;
      std::fprintf(stderr, "\r%s: %3zu%%", label.c_str(), last_report);
    }
  }
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  std::fprintf(stderr, "\r%s: 100%%\n", label.c_str());
}

}  // namespace shoal::bench
