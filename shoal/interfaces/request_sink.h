// Between the gateway and the instance manager, each of which calls the other: the manager
// hands queued requests to instances (RequestSink, implemented by the gateway) and the
// gateway asks for more instances when requests queue (ScaleSignal, implemented by the
// instance manager).
#pragma once

#include <cstdint>
#include <string>

namespace shoal {

struct RouteAssignment {
  uint32_t loop = 0;  // gateway loop that owns the request
  uint64_t request_id = 0;
  uint32_t instance = 0;  // endpoint key of the instance that takes it
};

// Implemented by the gateway; the instance manager calls it from its own thread.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // A queued request got an instance (its router slot is already taken).
  virtual void Deliver(const RouteAssignment& assignment) = 0;
  // Answer a queued request with an error instead (its function went away).
  virtual void Reject(uint32_t loop, uint64_t request_id, int http_status, std::string reason) = 0;
  // The instance died: answer every request in flight on it with `http_status`.
  virtual void FailInstance(uint32_t instance, int http_status, std::string reason) = 0;
};

// Implemented by the instance manager; the gateway calls it when requests start queueing.
class ScaleSignal {
 public:
  virtual ~ScaleSignal() = default;
  virtual void Poke() = 0;
};

}  // namespace shoal
