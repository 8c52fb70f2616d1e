// Partial-sum checkpoints (spec.durability.mode: partialSums): a leaf's float32 partial sum of
// a round, with the update-log seqs of the acknowledged updates it includes, in
// <job dir>/partial-<round>-<key>.sum. Written through a temporary file that is fsync'd and then
// renamed (and the directory fsync'd): a reader after kill -9 or a power cut sees a whole
// checkpoint or the one before. The bytes are copied out of the pool by the caller, at a moment
// no leaf folds into the partial sum; the fsync and the rename run on the writer's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

struct PartialCheckpointHead {
  uint64_t round = 0;
  uint64_t key = 0;   // the partial's key in its round (Round::partials)
  uint64_t base = 0;  // its updates' base version
  uint64_t num_params = 0;
  std::vector<uint64_t> seqs;  // the update-log records whose updates the sum includes
};

std::string PartialCheckpointFile(uint64_t round, uint64_t key);
// The checkpoints in `dir` (full paths), and those of rounds <= `round` removed (with any
// temporary file a crash left).
std::vector<std::string> ListPartialCheckpoints(const std::string& dir);
void RemovePartialCheckpoints(const std::string& dir, uint64_t round);
// Reads a checkpoint's head, and its sum into `into` (num_params floats) when not null. A file
// whose size, magic or parameter count is not what it should be is an error naming it.
Result<PartialCheckpointHead> ReadPartialCheckpoint(const std::string& path, uint64_t num_params,
                                                    float* into);
// Writes a checkpoint whole (fsync'd, renamed) on the calling thread: the commit thread's.
Status WritePartialCheckpoint(const std::string& dir, const PartialCheckpointHead& head,
                              const float* sum);

class PartialCheckpointWriter {
 public:
  PartialCheckpointWriter();
  ~PartialCheckpointWriter();  // finishes what was begun
  PartialCheckpointWriter(const PartialCheckpointWriter&) = delete;
  PartialCheckpointWriter& operator=(const PartialCheckpointWriter&) = delete;

  // On the caller, while nothing writes `sum`: the head and the sum written to a temporary file
  // (a copy into the page cache); its fsync and rename follow on the writer's thread, in the
  // order they were begun, then `on_durable` runs there.
  Status Begin(const std::string& dir, const PartialCheckpointHead& head, const float* sum,
               std::function<void()> on_durable);
  void Flush();  // returns once everything begun before is renamed

 private:
  struct Pending {
    int fd = -1;
    std::string tmp, path, dir;
    std::function<void()> on_durable;
  };
  void Loop();
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Pending> queue_;
  uint64_t begun_ = 0, finished_ = 0, next_tmp_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shoal
