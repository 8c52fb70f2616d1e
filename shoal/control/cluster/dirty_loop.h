// A pass the controller's leader runs in the background (placing functions, moving FL jobs,
// autoscaling): at once when started (or, kAfterEvery, `every` after), whenever poked
// (something it reads changed), and at least every `every`, so that a pass that failed (etcd
// away) is tried again. A failed pass is logged with `what`. One thread; passes never overlap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "shoal/common/status.h"

namespace shoal::cluster {

class DirtyLoop {
 public:
  enum class FirstPass { kAtOnce, kAfterEvery };
  DirtyLoop(std::string what, std::chrono::milliseconds every, std::function<Status()> pass,
            FirstPass first = FirstPass::kAtOnce);
  ~DirtyLoop();
  DirtyLoop(const DirtyLoop&) = delete;
  DirtyLoop& operator=(const DirtyLoop&) = delete;
  void Start();  // no-op when running
  void Stop();   // waits for a pass under way
  void Poke();
  bool running() const;

 private:
  void Run();
  const std::string what_;
  const std::chrono::milliseconds every_;
  const std::function<Status()> pass_;
  const FirstPass first_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = false;
  bool stop_ = false;
  bool dirty_ = false;
  std::thread thread_;
};

}  // namespace shoal::cluster
