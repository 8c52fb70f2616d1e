// Descriptors a gateway loop could not send yet because the target's queue was full
// (kResourceExhausted): kept in order and retried from the loop's retry timer, so a busy
// instance never blocks the loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "shoal/common/descriptor.h"
#include "shoal/common/status.h"
#include "shoal/dataplane/channel.h"

namespace shoal {

class DescriptorOutbox {
 public:
  explicit DescriptorOutbox(DescriptorChannel& channel) : channel_(channel) {}

  // Sends `d` now, or keeps it for Flush() when the target's queue is full (then true in
  // `*queued`). Any other error is returned and nothing is kept (the target is gone).
  Status Send(const EventDescriptor& d, bool* queued);
  // Sends what waits, oldest first, until a target's queue is full again. A descriptor whose
  // target has gone meanwhile is dropped with a warning (the crash path answers its request).
  // True when nothing waits any more.
  bool Flush();
  // Drops what waits for `target` (an instance that died).
  void DropFor(uint32_t target);

  bool empty() const { return waiting_.empty(); }
  size_t size() const { return waiting_.size(); }

 private:
  DescriptorChannel& channel_;
  std::deque<EventDescriptor> waiting_;
};

}  // namespace shoal
