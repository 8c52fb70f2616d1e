#include "shoal/dataplane/pool/warm_ahead.h"

#include <linux/futex.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace shoal::pool_detail {
namespace {

constexpr uint64_t kPage = 4096;
// One madvise at a time (it holds the mapping's lock for reading while it runs), so that neither
// a stop nor a writer of the mapping waits long. Not at a lower priority: a preempted holder of
// that lock would hold up shoald's own mmap calls (and the faults queued behind them).
constexpr uint64_t kChunkBytes = uint64_t{4} << 20;
// A refill waits for a lull this long in the pool's allocations, unless less than a quarter of
// the window is left above the high-water mark: a burst of bodies that fits the window is then
// received on warm pages without the refill's page zeroing taking the CPU it needs.
constexpr auto kLull = std::chrono::milliseconds(100);

// The futex word is in shared memory: no FUTEX_PRIVATE_FLAG, so other processes' waits match.
long Futex(const std::atomic<uint32_t>* word, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), op, val, nullptr, nullptr, 0);
}
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

}  // namespace

void WaitWarmSeq(const WarmState& state, uint32_t seen) {
  if (state.warm_seq.load(std::memory_order_acquire) != seen) return;
  Futex(&state.warm_seq, FUTEX_WAIT, seen);  // EAGAIN when it moved meanwhile: the caller looks
}

void WakeWarmWaiters(WarmState& state) {
  state.warm_seq.fetch_add(1, std::memory_order_acq_rel);
  Futex(&state.warm_seq, FUTEX_WAKE, INT_MAX);
}

WarmAhead::WarmAhead(char* base, uint64_t mapped, uint64_t heap_begin, WarmState* state,
                     uint64_t window)
    : base_(base), mapped_(mapped), heap_begin_(heap_begin), state_(state), window_(window) {
  thread_ = std::thread([this] { Run(); });
}

WarmAhead::~WarmAhead() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void WarmAhead::Kick() {
  {
    std::lock_guard lock(mu_);
    if (kicked_) return;
    kicked_ = true;
  }
  cv_.notify_one();
}

Status WarmAhead::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

uint64_t WarmAhead::Target() const {
  const uint64_t hw = std::max(state_->high_water.load(std::memory_order_relaxed), heap_begin_);
  return std::min((hw + window_ + kPage - 1) / kPage * kPage, mapped_);
}

bool WarmAhead::Urgent() const {
  const uint64_t hw = std::max(state_->high_water.load(std::memory_order_relaxed), heap_begin_);
  const uint64_t end = state_->warm_end.load(std::memory_order_relaxed);
  return std::min(end > hw ? end - hw : 0, mapped_ - std::min(hw, mapped_)) < window_ / 4 &&
         end < mapped_;
}

bool WarmAhead::AwaitLull() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stop_) return false;
    if (Urgent()) return true;
    const uint64_t hw = state_->high_water.load(std::memory_order_relaxed);
    if (cv_.wait_for(lock, kLull, [&] { return stop_; })) return false;
    if (state_->high_water.load(std::memory_order_relaxed) == hw) return true;
  }
}

void WarmAhead::Run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return kicked_ || stop_; });
      if (stop_) return;
      kicked_ = false;
    }
    if (!AwaitLull()) return;
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t from0 =
        std::max(state_->warm_end.load(std::memory_order_acquire), heap_begin_ / kPage * kPage);
    uint64_t from = from0;
    uint64_t seen = state_->high_water.load(std::memory_order_relaxed);
    for (uint64_t target = Target(); from < target; target = Target()) {
      // Allocations came back while it refilled: it yields to them again unless urgent.
      const uint64_t hw = state_->high_water.load(std::memory_order_relaxed);
      if (hw != seen && !AwaitLull()) return;
      seen = state_->high_water.load(std::memory_order_relaxed);
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
      }
      const uint64_t len = std::min(kChunkBytes, target - from);
      // Allocates the tmpfs pages (zeroed once, here) and maps them writable in shoald, without
      // writing to them: a buffer handed out meanwhile keeps what its writer put there.
      if (madvise(base_ + from, len, MADV_POPULATE_WRITE) != 0) {
        const int err = errno;
        const std::string why =
            err == EINVAL ? std::string("this kernel has no MADV_POPULATE_WRITE (Linux >= 5.14)")
                          : std::string(std::strerror(err)) + " (is /dev/shm full?)";
        spdlog::warn(
            "pool: warming ahead stopped at {} MiB: {}; buffers above fault in on first use",
            from >> 20, why);
        std::lock_guard lock(mu_);
        error_ = Unavailable("warming the pool ahead: " + why);
        return;
      }
      from += len;
      state_->warm_end.store(from, std::memory_order_release);
      WakeWarmWaiters(*state_);
    }
    if (from > from0) {
      spdlog::debug(
          "pool: warmed {} MiB ahead of the allocations in {:.1f} ms (to {} MiB)",
          (from - from0) >> 20,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
          from >> 20);
    }
  }
}

}  // namespace shoal::pool_detail
