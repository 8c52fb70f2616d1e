// How a serving handler follows an FL job: `check` runs on a thread of its own each time the
// job commits (Notify, from the instance's kJobCommitted notice: shoald tells the instances of
// the functions that follow a job as each version commits on its node) and, as a safety net,
// every `safety_poll` without one (a notice sent while the instance was starting, or a job whose
// top is another node of a cluster: only the top's node hears its commits). Several notices
// while `check` runs make one more run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace shoal {

// The safety poll when SHOAL_INFER_POLL_MS does not say.
inline constexpr uint64_t kDefaultSafetyPollMs = 1000;

class CommitWatch {
 public:
  CommitWatch() = default;
  CommitWatch(const CommitWatch&) = delete;
  CommitWatch& operator=(const CommitWatch&) = delete;
  ~CommitWatch() { Stop(); }

  void Start(std::chrono::milliseconds safety_poll, std::function<void()> check) {
    safety_poll_ = safety_poll;
    check_ = std::move(check);
    thread_ = std::thread([this] { Run(); });
  }
  // Any thread; returns at once.
  void Notify() {
    {
      std::lock_guard lock(mu_);
      pending_ = true;
    }
    cv_.notify_one();
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, safety_poll_, [this] { return stopping_ || pending_; });
      if (stopping_) return;
      pending_ = false;
      lock.unlock();
      check_();
      lock.lock();
    }
  }

  std::chrono::milliseconds safety_poll_{kDefaultSafetyPollMs};
  std::function<void()> check_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool pending_ = false;
  std::thread thread_;
};

}  // namespace shoal
