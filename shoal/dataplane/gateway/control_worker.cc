#include "shoal/dataplane/gateway/control_worker.h"

#include <utility>

#include "shoal/dataplane/gateway/gateway.h"

namespace shoal {

ControlWorker::ControlWorker(HttpService& service, uint32_t threads, ReplyFn reply)
    : service_(service), threads_(threads == 0 ? 1 : threads), reply_(std::move(reply)) {}

ControlWorker::~ControlWorker() { Stop(); }

void ControlWorker::Start() {
  for (uint32_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { Run(); });
}

void ControlWorker::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    calls_.clear();
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ControlWorker::Submit(ControlCall call) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    calls_.push_back(std::move(call));
  }
  cv_.notify_one();
}

void ControlWorker::Run() {
  for (;;) {
    ControlCall call;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !calls_.empty(); });
      if (stopping_) return;
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    HttpReply r =
        service_.Handle(call.method, call.path, call.query, call.body, call.who, call.headers);
    reply_(call, std::move(r));
  }
}

}  // namespace shoal
