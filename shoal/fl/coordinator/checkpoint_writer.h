// CheckpointWriter: writes FL job checkpoints (model, optimizer, state.json) on a thread of its
// own, behind the commits. A committed version is visible (task, model download, inference hot
// swap) as soon as the coordinator holds it in memory; its files follow. Durability does not
// wait for them: until a version's checkpoint is written, the update log still names the
// updates it includes and their buffers stay held in the pool, so a crash in between re-folds
// them from the log and commits the same version again (FlCoordinator::Recover).
//
// Items are written in the order they were queued, so state.json never names a model newer than
// the model file beside it. An item whose files a later queued item of the same directory
// supersedes (a later model, or any later state for a state-only item) is not written; its
// on_durable still runs, in order, once the superseding files are on disk.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

// Writes `path` through `path`.tmp and a rename: a reader sees the old file or the new one.
Status WriteFileAtomic(const std::string& path, const void* data, size_t n);

// A checkpoint's files in the job's directory: model.<v>.safetensors, optimizer.<v>.bin and
// state.json naming v. Written in that order; the older versions' files go after state.json.
std::string ModelFile(uint64_t version);
std::string OptimizerFile(uint64_t version);

class CheckpointWriter {
 public:
  struct Item {
    std::string job;  // for the log
    std::string dir;  // <state_dir>/jobs/<job>
    uint64_t version = 0;
    std::shared_ptr<const std::string> model;  // model.safetensors; null: not this time
    std::shared_ptr<const std::vector<uint8_t>> optimizer;  // optimizer.bin; null: none
    std::string state;                                      // state.json
    std::function<void()> on_durable;  // on the writer's thread, after the files are written
  };

  // `delay`: the checkpoint of a committed version (a model item of version > 0) is written no
  // earlier than this long after it was queued, and what is queued behind it waits with it (0
  // in production; tests use it to hold the crash window open).
  explicit CheckpointWriter(std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  // Writes everything still queued (without the delay), then stops.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues an item; returns its ticket for Wait.
  uint64_t Enqueue(Item item);
  // Returns once the item of `ticket` (and every earlier one) is done.
  void Wait(uint64_t ticket);
  // Returns once every item queued before the call is done.
  void Flush();

  uint64_t written() const;     // items whose files were written
  uint64_t superseded() const;  // items a later one made unnecessary

 private:
  struct Queued {
    uint64_t ticket = 0;
    std::chrono::steady_clock::time_point at;
    Item item;
    // Items this one supersedes, in queue order: done when this one's files are written.
    std::vector<uint64_t> covers;
    std::vector<std::function<void()>> covered_callbacks;
  };
  void Loop();
  void Write(const Item& item);

  const std::chrono::milliseconds delay_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // the writer: an item or stop
  std::condition_variable done_;  // Wait/Flush: an item finished
  std::deque<Queued> queue_;
  uint64_t next_ticket_ = 1;
  std::set<uint64_t> undone_;  // queued, or superseded by an item not written yet
  uint64_t written_ = 0, superseded_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shoal
