#include "shoal/control/node/commit_feed.h"

#include <utility>

namespace shoal {

void CommitFeed::Publish(std::string job, uint64_t version) {
  {
    std::lock_guard lock(mu_);
    recent_.push_back({++last_seq_, std::move(job), version});
    if (recent_.size() > kKept) recent_.pop_front();
  }
  cv_.notify_all();
}

std::vector<CommitNotice> CommitFeed::WaitAfter(uint64_t* seq,
                                                std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return last_seq_ > *seq; });
  std::vector<CommitNotice> out;
  for (const CommitNotice& c : recent_) {
    if (c.seq > *seq) out.push_back(c);
  }
  *seq = last_seq_;
  return out;
}

uint64_t CommitFeed::Latest() const {
  std::lock_guard lock(mu_);
  return last_seq_;
}

}  // namespace shoal
