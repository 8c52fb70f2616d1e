// Internal to shoal_fl_robust: runs tasks 0..count-1 on a WorkerTeam (the caller works too), each
// thread taking the next task from a shared counter as FoldPool takes its chunks. A task learns
// the index of the thread running it, to use that thread's scratch.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>

#include "shoal/fl/kernels/worker_team.h"

namespace shoal::aggregator::internal {

class TaskPool {
 public:
  using Task = std::function<void(size_t task, unsigned thread)>;

  explicit TaskPool(unsigned threads) : team_(threads) {}
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  unsigned threads() const { return team_.threads(); }
  // Returns once every task has run. One call at a time.
  void Run(size_t count, const Task& task);

 private:
  void Take(unsigned thread);

  const Task* task_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  WorkerTeam team_;
};

}  // namespace shoal::aggregator::internal
