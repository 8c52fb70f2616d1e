// Warm-ahead for a Boost pool (the config's pool_warm_bytes): a fresh tmpfs page costs a fault
// and the kernel's zeroing of it on first touch (about 2.5x the copy of a 46.8 MB update into
// warm pages here), and a Boost heap hands out its never-used memory from the low end up. So
// shoald keeps a window of that memory above the highest allocation allocated and mapped, in a
// background thread, and the instances that read whole buffers follow it in their own mappings
// (a futex in the pool header wakes them): bodies and partial sums land on warm pages without
// committing the whole pool at once (pool_prefault).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include "shoal/common/status.h"

namespace shoal::pool_detail {

// In the pool header, seen by every process that maps the pool.
struct WarmState {
  std::atomic<uint64_t> high_water;  // end (offset in the mapping) of the heap handed out so far
  std::atomic<uint64_t> warm_end;    // pages below it (from the heap's start) are allocated
  std::atomic<uint32_t> warm_seq;    // bumped, and futex-woken, whenever warm_end moves
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Raises state->high_water to `end` (any process, after a heap allocation).
inline void RaiseHighWater(WarmState& state, uint64_t end) {
  uint64_t hw = state.high_water.load(std::memory_order_relaxed);
  while (end > hw && !state.high_water.compare_exchange_weak(hw, end, std::memory_order_relaxed)) {
  }
}

// Blocks until state.warm_seq differs from `seen` (or a spurious wake-up); any process.
void WaitWarmSeq(const WarmState& state, uint32_t seen);
// Wakes every process waiting in WaitWarmSeq.
void WakeWarmWaiters(WarmState& state);

// shoald's side: the thread that keeps [high water, high water + window) populated.
class WarmAhead {
 public:
  // `base`..`base + mapped`: the pool's mapping; `heap_begin`: where its heap starts.
  WarmAhead(char* base, uint64_t mapped, uint64_t heap_begin, WarmState* state, uint64_t window);
  ~WarmAhead();  // stops the thread (a populate under way ends after its chunk)
  WarmAhead(const WarmAhead&) = delete;
  WarmAhead& operator=(const WarmAhead&) = delete;

  // After an allocation: wakes the thread when the warm margin above the high water fell below
  // three quarters of the window (so it refills in batches, not after every buffer); the thread
  // then waits for a lull in the allocations unless the margin is under a quarter.
  void Allocated() {
    const uint64_t hw = state_->high_water.load(std::memory_order_relaxed);
    if (hw + window_ - window_ / 4 > state_->warm_end.load(std::memory_order_relaxed)) Kick();
  }
  // The first error the thread met (then it stopped warming), or ok.
  Status error() const;

 private:
  void Kick();
  void Run();
  uint64_t Target() const;
  // Less than a quarter of the window left above the high-water mark (and the pool not warm to
  // its end).
  bool Urgent() const;
  // Waits until the allocations paused (kLull in warm_ahead.cc) or it is urgent; false on stop.
  bool AwaitLull();

  char* const base_;
  const uint64_t mapped_;
  const uint64_t heap_begin_;
  WarmState* const state_;
  const uint64_t window_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool kicked_ = true;  // the first window right away
  bool stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace shoal::pool_detail
