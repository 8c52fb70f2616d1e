// One function instance (the body of shoal-fn): an event loop woken by its data-plane socket
// that runs one handler on each request descriptor and answers with a response descriptor.
// Requests run inline when the function's concurrency is 1, else on that many worker threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/buffer_pool.h"
#include "shoal/common/descriptor.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/channel/channel.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {

// What shoald tells an instance at start (environment variables SHOAL_*; fd 3 is the socket).
struct InstanceOptions {
  std::string function;      // SHOAL_FUNCTION
  uint32_t function_id = 0;  // SHOAL_FUNCTION_ID
  uint32_t endpoint = 0;     // SHOAL_ENDPOINT: this instance's data-plane key
  std::string node;          // SHOAL_NODE
  std::string dataplane;     // SHOAL_DATAPLANE: sockmap | unix
  std::string pool;          // SHOAL_POOL: shared-memory segment name
  HolderSlot slot = 0;       // SHOAL_SLOT
  std::string handler;       // SHOAL_HANDLER: builtin:<name> | library:<path>:<symbol>
  uint32_t concurrency = 1;  // SHOAL_CONCURRENCY
  int fd = 3;
  // Forked from a zygote: a pipe that reaches end of file when shoald is gone (a spawned
  // instance has its parent-death signal instead). -1: none.
  int lifeline_fd = -1;

  static Result<InstanceOptions> FromEnvironment();
};

class FunctionInstance {
 public:
  FunctionInstance(InstanceOptions options, BufferPool& pool,
                   std::unique_ptr<DescriptorChannel> channel, std::unique_ptr<Handler> handler);
  ~FunctionInstance();

  // Announces readiness to shoald, then serves until SIGTERM/SIGINT (drains in-flight requests)
  // or until the data-plane socket closes. Returns the process exit code.
  int Run();

  // Runs one request descriptor to completion and sends its response (public for tests).
  void Process(const EventDescriptor& request);
  // A kBodyChunk descriptor: the handler's OnBodyArriving, no answer (public for tests).
  void ProcessBodyChunk(const EventDescriptor& chunk);

 private:
  // Stamps and sends `reply`; while the loop runs a received batch inline, keeps it for
  // FlushReplies instead.
  void SendReply(EventDescriptor reply);
  // Sends `reply`, retrying while the target's queue is full; a lost reply's buffer is released.
  void Deliver(const EventDescriptor& reply);
  // Sends the kept replies (SendMany), in order.
  void FlushReplies();
  void WorkerMain();
  // The handler's view of a request (or body chunk) descriptor's payload.
  Request MakeRequest(const PayloadView& payload, const EventDescriptor& d);

  InstanceOptions options_;
  BufferPool& pool_;
  std::unique_ptr<DescriptorChannel> channel_;
  std::unique_ptr<Handler> handler_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EventDescriptor> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  // Only the loop thread, and only without workers, batches its replies.
  bool batching_ = false;
  uint32_t quick_streak_ = 0;  // inline requests answered in a row within kQuickHandlerNs
  std::vector<EventDescriptor> replies_;
};

}  // namespace shoal
