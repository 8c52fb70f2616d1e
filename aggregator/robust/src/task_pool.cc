#include "task_pool.h"

#include <algorithm>

#include "shoal/common/stop_signal.h"

namespace shoal::aggregator::internal {

TaskPool::TaskPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

TaskPool::~TaskPool() {
  SignalStop(mu_, stop_, wake_);
  for (auto& t : workers_) t.join();
}

void TaskPool::Take(unsigned thread) {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= count_) return;
    (*task_)(i, thread);
  }
}

void TaskPool::Run(size_t count, const Task& task) {
  if (count == 0) return;
  if (workers_.empty() || count == 1) {
    for (size_t i = 0; i < count; ++i) task(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    count_ = count;
    next_.store(0, std::memory_order_relaxed);
    busy_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  Take(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return busy_ == 0; });
}

void TaskPool::WorkerLoop(unsigned thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Take(thread);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --busy_ == 0;
    }
    if (last) done_.notify_one();
  }
}

}  // namespace shoal::aggregator::internal
