// Dynamic batching for the inference handler: requests running on the instance's worker
// threads enqueue their rows and wait; one batching thread forms batches (the first request of
// a batch waits at most max_delay for others, up to max_batch rows), runs each on the model
// version current when the batch starts, and hands every request its rows. A new version
// (hot swap) is installed with Swap() and used from the next batch on: a batch in flight
// finishes on the version it started with, and no request waits for a swap.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <semaphore>
#include <span>
#include <thread>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/serving/executor/executor.h"

namespace shoal {

// One compiled model version. Immutable; shared by the batcher and whoever swapped it in.
struct ServingModel {
  std::shared_ptr<inference::Executable> executable;
  uint64_t version = 0;
};

struct BatcherOptions {
  int64_t max_batch = 32;
  std::chrono::microseconds max_delay{2000};
};

struct BatcherStats {
  uint64_t requests = 0;
  uint64_t batches = 0;
  uint64_t rows = 0;
  uint64_t swaps = 0;
  uint64_t failed_batches = 0;
  std::vector<uint64_t> batch_rows_histogram;  // [rows] -> batches of that many rows
};

class DynamicBatcher {
 public:
  DynamicBatcher(BatcherOptions options, std::shared_ptr<const ServingModel> initial);
  ~DynamicBatcher();
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Runs `rows` samples (row-major float32, `input` holds rows * per-sample input values) and
  // waits for their outputs in `output`. Returns the version that answered. Thread-safe; called
  // from many threads at once.
  Result<uint64_t> Infer(std::span<const float> input, int64_t rows, std::span<float> output);

  // Installs a new version for the batches that start from now on.
  void Swap(std::shared_ptr<const ServingModel> next);
  std::shared_ptr<const ServingModel> current() const;

  BatcherStats stats() const;
  const BatcherOptions& options() const { return options_; }

 private:
  struct Ticket;
  void Loop();
  void RunBatch(Ticket* first, int64_t rows);

  const BatcherOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Ticket* head_ = nullptr;  // FIFO of waiting requests, linked through the tickets themselves
  Ticket* tail_ = nullptr;
  int64_t queued_rows_ = 0;
  bool stopping_ = false;
  std::shared_ptr<const ServingModel> current_;  // guarded by mu_

  // The batching thread's buffers: one batch of inputs and outputs, grown once.
  std::vector<float> batch_in_;
  std::vector<float> batch_out_;

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> rows_{0};
  std::atomic<uint64_t> swaps_{0};
  std::atomic<uint64_t> failed_batches_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> histogram_;  // max_batch + 1 entries
  std::thread thread_;
};

}  // namespace shoal
