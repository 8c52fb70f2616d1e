// The descriptors a gateway loop sends: those of one loop iteration are kept (Queue) and sent
// together from the loop's check handle (SendQueued: one sendmmsg, and on the sockmap data plane
// one message per target). Those the target's queue cannot take yet (kResourceExhausted) wait,
// in order, for the loop's retry timer (Flush), so a busy instance never blocks the loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "shoal/common/descriptor.h"
#include "shoal/common/status.h"
#include "shoal/dataplane/channel/channel.h"

namespace shoal {

class DescriptorOutbox {
 public:
  // `failed` hears of each queued descriptor that SendQueued could not send for any other
  // reason than a full queue (its target is gone), with the reason.
  using Failed = std::function<void(const EventDescriptor&, const Status&)>;
  explicit DescriptorOutbox(DescriptorChannel& channel, Failed failed = {})
      : channel_(channel), failed_(std::move(failed)) {
    queued_.reserve(kBatchReserve);
    sending_.reserve(kBatchReserve);
  }

  // Keeps `d` for SendQueued.
  void Queue(const EventDescriptor& d) { queued_.push_back(d); }
  // Sends what Queue kept (and what `failed` queues meanwhile), in order. A descriptor whose
  // target's queue is full waits for Flush with the later ones for the same target. True when
  // something waits for Flush.
  bool SendQueued();

  // Sends `d` now, or keeps it for Flush() when the target's queue is full (then true in
  // `*queued`). Any other error is returned and nothing is kept (the target is gone).
  Status Send(const EventDescriptor& d, bool* queued);
  // Sends what waits, oldest first, until a target's queue is full again. A descriptor whose
  // target has gone meanwhile is dropped with a warning (the crash path answers its request).
  // True when nothing waits any more.
  bool Flush();
  // Drops what waits or is queued for `target` (an instance that died).
  void DropFor(uint32_t target);

  bool empty() const { return waiting_.empty(); }
  size_t size() const { return waiting_.size(); }

 private:
  static constexpr size_t kBatchReserve = 256;

  DescriptorChannel& channel_;
  Failed failed_;
  std::vector<EventDescriptor> queued_, sending_;
  std::deque<EventDescriptor> waiting_;
};

}  // namespace shoal
