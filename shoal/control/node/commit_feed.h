// The FL jobs' commits as they happen, for the control listener's event streams
// (GET /v1/events): the coordinator publishes each committed version from its commit thread,
// each stream waits for the ones after the last it sent. Only the newest few are kept: a
// stream that falls that far behind still gets the next periodic snapshot.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace shoal {

struct CommitNotice {
  uint64_t seq = 0;  // this feed's order, from 1
  std::string job;
  uint64_t version = 0;
};

class CommitFeed {
 public:
  // Any thread; never blocks for long (one lock, one notify).
  void Publish(std::string job, uint64_t version);
  // Waits until a commit after `*seq` is published or `deadline` passes; returns the commits
  // after `*seq` (oldest first) and moves `*seq` past them. A new reader starts at Latest().
  std::vector<CommitNotice> WaitAfter(uint64_t* seq,
                                      std::chrono::steady_clock::time_point deadline);
  uint64_t Latest() const;

 private:
  static constexpr size_t kKept = 256;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CommitNotice> recent_;
  uint64_t last_seq_ = 0;
};

}  // namespace shoal
