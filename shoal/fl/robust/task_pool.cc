#include "shoal/fl/robust/task_pool.h"

namespace shoal::aggregator::internal {

void TaskPool::Take(unsigned thread) {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= count_) return;
    (*task_)(i, thread);
  }
}

void TaskPool::Run(size_t count, const Task& task) {
  if (count == 0) return;
  if (threads() == 1 || count == 1) {
    for (size_t i = 0; i < count; ++i) task(i, 0);
    return;
  }
  task_ = &task;
  count_ = count;
  next_.store(0, std::memory_order_relaxed);
  auto take = [this](unsigned thread) { Take(thread); };
  team_.Run(take);
}

}  // namespace shoal::aggregator::internal
