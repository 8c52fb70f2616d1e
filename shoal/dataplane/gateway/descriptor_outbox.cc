#include "shoal/dataplane/gateway/descriptor_outbox.h"

#include <algorithm>

#include "shoal/common/log.h"

namespace shoal {

Status DescriptorOutbox::Send(const EventDescriptor& d, bool* queued) {
  *queued = false;
  Status st = channel_.Send(d);
  if (st.code() != StatusCode::kResourceExhausted) return st;
  waiting_.push_back(d);
  *queued = true;
  return {};
}

bool DescriptorOutbox::SendQueued() {
  while (!queued_.empty()) {
    // What `failed_` queues while this batch goes waits for the next turn of the loop.
    sending_.swap(queued_);
    std::span<EventDescriptor> rest(sending_);
    while (!rest.empty()) {
      Status st;
      rest = rest.subspan(channel_.SendMany(rest, &st));
      if (rest.empty()) break;
      const uint32_t target = rest.front().target;
      if (st.code() == StatusCode::kResourceExhausted) {
        // The target's queue is full: its descriptors wait, in order; the others go on.
        auto busy = std::stable_partition(
            rest.begin(), rest.end(), [&](const EventDescriptor& d) { return d.target != target; });
        waiting_.insert(waiting_.end(), busy, rest.end());
        rest = rest.first(static_cast<size_t>(busy - rest.begin()));
        continue;
      }
      if (failed_) failed_(rest.front(), st);
      rest = rest.subspan(1);
    }
    sending_.clear();
  }
  return !waiting_.empty();
}

bool DescriptorOutbox::Flush() {
  while (!waiting_.empty()) {
    Status st = channel_.Send(waiting_.front());
    if (st.code() == StatusCode::kResourceExhausted) return false;
    if (!st.ok()) {
      spdlog::warn("descriptor to {:#x} dropped after retry: {}", waiting_.front().target,
                   st.ToString());
    }
    waiting_.pop_front();
  }
  return true;
}

void DescriptorOutbox::DropFor(uint32_t target) {
  std::erase_if(waiting_, [&](const EventDescriptor& d) { return d.target == target; });
  std::erase_if(queued_, [&](const EventDescriptor& d) { return d.target == target; });
}

}  // namespace shoal
