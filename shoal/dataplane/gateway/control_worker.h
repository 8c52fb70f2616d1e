// The fleet control routes (/v1/jobs/{job}, join, task, model, eval) off the data-path loops:
// a join or an evaluation may read and write files, so the loop hands the call to a control
// thread and goes on serving; the reply comes back to the loop that owns the connection.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/interfaces/http_reply.h"
#include "shoal/security/auth/token_store.h"

namespace shoal {

class HttpService;

struct ControlCall {
  uint32_t loop = 0;        // the gateway loop the reply goes back to
  uint64_t request_id = 0;  // its pending request
  std::string method, path, query, body;
  auth::Principal who;
  ServiceHeaders headers;
};

class ControlWorker {
 public:
  // `reply` runs on a control thread with the call and the service's reply.
  using ReplyFn = std::function<void(const ControlCall& call, HttpReply reply)>;
  ControlWorker(HttpService& service, uint32_t threads, ReplyFn reply);
  ~ControlWorker();
  ControlWorker(const ControlWorker&) = delete;
  ControlWorker& operator=(const ControlWorker&) = delete;

  void Start();
  // Finishes the calls running now and drops the ones waiting (their connections close with
  // the gateway); no reply is sent after Stop returns.
  void Stop();
  void Submit(ControlCall call);
  uint32_t threads() const { return threads_; }
  // Calls submitted and not yet started.
  size_t waiting() {
    std::lock_guard lock(mu_);
    return calls_.size();
  }

 private:
  void Run();

  HttpService& service_;
  const uint32_t threads_;
  ReplyFn reply_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ControlCall> calls_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace shoal
