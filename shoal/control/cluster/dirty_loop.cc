#include "shoal/control/cluster/dirty_loop.h"

#include <spdlog/spdlog.h>

namespace shoal::cluster {

DirtyLoop::DirtyLoop(std::string what, std::chrono::milliseconds every,
                     std::function<Status()> pass, FirstPass first)
    : what_(std::move(what)), every_(every), pass_(std::move(pass)), first_(first) {}

DirtyLoop::~DirtyLoop() { Stop(); }

void DirtyLoop::Start() {
  std::lock_guard lock(mu_);
  if (running_) return;
  running_ = true;
  stop_ = false;
  dirty_ = first_ == FirstPass::kAtOnce;
  thread_ = std::thread([this] { Run(); });
}

void DirtyLoop::Stop() {
  std::thread t;
  {
    std::lock_guard lock(mu_);
    if (!running_) return;
    running_ = false;
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

void DirtyLoop::Poke() {
  {
    std::lock_guard lock(mu_);
    dirty_ = true;
  }
  cv_.notify_all();
}

bool DirtyLoop::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

void DirtyLoop::Run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, every_, [this] { return stop_ || dirty_; });
      if (stop_) return;
      dirty_ = false;
    }
    if (Status st = pass_(); !st.ok()) spdlog::warn("{}: {}", what_, st.message());
  }
}

}  // namespace shoal::cluster
