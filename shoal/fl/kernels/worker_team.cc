#include "shoal/fl/kernels/worker_team.h"

#include <algorithm>

#include "shoal/common/stop_signal.h"

namespace shoal::aggregator {

WorkerTeam::WorkerTeam(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

WorkerTeam::~WorkerTeam() {
  SignalStop(mu_, stop_, wake_);
  for (auto& t : workers_) t.join();
}

void WorkerTeam::RunErased(void* work, Call call) {
  if (workers_.empty()) {
    call(work, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_ = work;
    call_ = call;
    busy_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  call(work, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return busy_ == 0; });
}

void WorkerTeam::WorkerLoop(unsigned thread) {
  uint64_t seen = 0;
  for (;;) {
    void* work;
    Call call;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      work = work_;
      call = call_;
    }
    call(work, thread);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --busy_ == 0;
    }
    if (last) done_.notify_one();
  }
}

}  // namespace shoal::aggregator
