// Work other threads hand to one gateway loop (assignments and rejections from the instance
// manager, dead instances, control replies). Producers append under a short lock; the loop
// swaps the whole batch out and works through it without the lock. Waking the loop
// (uv_async_send) is the caller's.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

namespace shoal {

template <class Item>
class LoopInbox {
 public:
  void Push(Item item) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
  }

  // Calls `fn(Item&)` for every item pushed so far, in order. Loop thread only.
  template <class Fn>
  size_t Drain(Fn&& fn) {
    {
      std::lock_guard lock(mu_);
      work_.swap(items_);
    }
    const size_t n = work_.size();
    for (Item& item : work_) fn(item);
    work_.clear();  // keeps its capacity: no allocation once warm
    return n;
  }

 private:
  std::mutex mu_;
  std::vector<Item> items_;
  std::vector<Item> work_;
};

}  // namespace shoal
