// Internal to shoal_fl_robust: runs tasks 0..count-1 on a fixed set of threads (the caller works
// too), each thread taking the next task from a shared counter as FoldPool takes its chunks. A
// task learns the index of the thread running it, to use that thread's scratch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shoal::aggregator::internal {

class TaskPool {
 public:
  using Task = std::function<void(size_t task, unsigned thread)>;

  explicit TaskPool(unsigned threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }
  // Returns once every task has run. One call at a time.
  void Run(size_t count, const Task& task);

 private:
  void Take(unsigned thread);
  void WorkerLoop(unsigned thread);

  std::mutex mu_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  unsigned busy_ = 0;
  bool stop_ = false;
  const Task* task_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> workers_;
};

}  // namespace shoal::aggregator::internal
