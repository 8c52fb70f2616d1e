// The router of one function: which of its instances takes the next request, and the queue of
// requests waiting while none is free (Knative's activator behaviour, inside the gateway).
// Gateway loops call Acquire/Release on every request; the instance manager adds and removes
// instances. One mutex, held for a few instructions; no allocation on the request path
// except when the wait queue grows.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/interfaces/request_sink.h"

namespace shoal {

class FunctionRouter {
 public:
  explicit FunctionRouter(uint32_t max_queue) : max_queue_(max_queue) {}

  enum class Outcome { kAssigned, kQueued, kRejected };
  struct AcquireResult {
    Outcome outcome;
    uint32_t instance = 0;  // when kAssigned
  };
  // A request arrived: pick the least-loaded ready instance with a free slot, or queue it.
  // kRejected when the queue is full (the gateway answers 503), or, with `may_queue` false,
  // when no instance is free now (nothing counted: the caller asks again later).
  AcquireResult Acquire(uint32_t loop, uint64_t request_id, bool may_queue = true);
  // A request on `instance` finished: the slot goes to the oldest waiter, if any.
  std::optional<RouteAssignment> Release(uint32_t instance);
  // A waiting request gave up (timeout or client gone). False if it was not waiting.
  bool CancelWaiter(uint32_t loop, uint64_t request_id);

  // Instance manager side.
  // Empties the wait queue (the function is going away); returns who was waiting.
  std::vector<RouteAssignment> TakeWaiters();
  // An instance is ready with `capacity` slots: returns the waiters it takes now.
  std::vector<RouteAssignment> AddInstance(uint32_t instance, uint32_t capacity);
  // Stop routing new requests to it (scale-down); its in-flight requests finish.
  void Drain(uint32_t instance);
  // The instance is gone (stopped or crashed); returns its in-flight count.
  uint32_t RemoveInstance(uint32_t instance);

  struct Snapshot {
    uint32_t ready = 0;  // routable instances
    uint32_t draining = 0;
    uint32_t inflight = 0;
    uint32_t queued = 0;
    uint32_t capacity = 0;  // free + busy slots of routable instances
  };
  Snapshot Counts() const;
  uint32_t Inflight(uint32_t instance) const;
  struct InstanceLoad {
    uint32_t instance;
    uint32_t inflight;
    uint64_t served;  // requests it finished
    bool draining;
  };
  std::vector<InstanceLoad> Loads() const;
  // Instances with no request in flight that are draining (ready to be stopped).
  std::vector<uint32_t> IdleDraining() const;

  // Cumulative counts since the router was made; the autoscaler samples them every control
  // interval and takes differences.
  struct Totals {
    uint64_t arrivals = 0;     // Acquire calls that were not rejected
    uint64_t completions = 0;  // Release calls
    uint64_t dequeued = 0;     // waiters that got an instance
    double queue_wait_s = 0;   // their summed time in the queue
    double busy_s = 0;         // in-flight requests integrated over time (Little's law)
  };
  Totals totals() const;

 private:
  struct Slot {
    uint32_t instance;
    uint32_t capacity;
    uint32_t inflight;
    bool draining;
    uint64_t served;
  };
  struct Waiter {
    uint32_t loop;
    uint64_t request_id;
    uint64_t enqueued_ns;
  };
  Slot* Find(uint32_t instance);
  // Called with mu_ held before the total in flight changes by `delta`.
  void Account(int delta, uint64_t now_ns);
  void Dequeued(const Waiter& w, uint64_t now_ns);
  const Slot* Find(uint32_t instance) const;

  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::deque<Waiter> waiters_;
  uint32_t max_queue_;
  uint32_t inflight_total_ = 0;
  uint64_t last_change_ns_ = 0;
  Totals totals_;
};

}  // namespace shoal
