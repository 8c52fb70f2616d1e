#include "descriptor_outbox.h"

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
}

}  // namespace shoal
