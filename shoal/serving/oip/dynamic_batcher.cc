#include "shoal/serving/oip/dynamic_batcher.h"

#include <algorithm>
#include <cstring>

#include "shoal/common/stop_signal.h"

namespace shoal {

// A waiting request. Lives on the requesting thread's stack from Infer() until the batching
// thread releases `done`; the queue links tickets, so enqueueing allocates nothing.
struct DynamicBatcher::Ticket {
  std::span<const float> input;
  std::span<float> output;
  int64_t rows = 0;
  std::chrono::steady_clock::time_point enqueued;
  Ticket* next = nullptr;
  Status status;
  uint64_t version = 0;
  std::binary_semaphore done{0};
};

DynamicBatcher::DynamicBatcher(BatcherOptions options, std::shared_ptr<const ServingModel> initial)
    : options_(options),
      current_(std::move(initial)),
      histogram_(new std::atomic<uint64_t>[static_cast<size_t>(options.max_batch) + 1]) {
  for (int64_t i = 0; i <= options_.max_batch; ++i) histogram_[i].store(0);
  thread_ = std::thread([this] { Loop(); });
}

DynamicBatcher::~DynamicBatcher() {
  SignalStop(mu_, stopping_, cv_);
  thread_.join();
}

Result<uint64_t> DynamicBatcher::Infer(std::span<const float> input, int64_t rows,
                                       std::span<float> output) {
  if (rows <= 0 || rows > options_.max_batch) {
    return InvalidArgument("batch of " + std::to_string(rows) + " rows is outside 1.." +
                           std::to_string(options_.max_batch));
  }
  Ticket t;
  t.input = input;
  t.output = output;
  t.rows = rows;
  t.enqueued = std::chrono::steady_clock::now();
  bool wake;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Unavailable("the inference handler is stopping");
    const bool was_empty = head_ == nullptr;
    if (tail_)
      tail_->next = &t;
    else
      head_ = &t;
    tail_ = &t;
    queued_rows_ += rows;
    // The batching thread sleeps until a first request arrives, then until the batch is
    // full or the first request's delay is up: only those two events need a wake-up.
    wake = was_empty || queued_rows_ >= options_.max_batch;
  }
  if (wake) cv_.notify_one();
  requests_.fetch_add(1, std::memory_order_relaxed);
  t.done.acquire();
  if (!t.status.ok()) return t.status;
  return t.version;
}

void DynamicBatcher::Swap(std::shared_ptr<const ServingModel> next) {
  std::lock_guard lock(mu_);
  current_ = std::move(next);
  swaps_.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<const ServingModel> DynamicBatcher::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

BatcherStats DynamicBatcher::stats() const {
  BatcherStats s;
  s.requests = requests_.load();
  s.batches = batches_.load();
  s.rows = rows_.load();
  s.swaps = swaps_.load();
  s.failed_batches = failed_batches_.load();
  s.batch_rows_histogram.resize(static_cast<size_t>(options_.max_batch) + 1);
  for (int64_t i = 0; i <= options_.max_batch; ++i)
    s.batch_rows_histogram[i] = histogram_[i].load();
  return s;
}

void DynamicBatcher::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || head_ != nullptr; });
    if (head_ == nullptr) return;  // stopping and drained
    const auto deadline = head_->enqueued + options_.max_delay;
    while (!stopping_ && queued_rows_ < options_.max_batch &&
           std::chrono::steady_clock::now() < deadline) {
      cv_.wait_until(lock, deadline);
    }
    // Take whole requests, in arrival order, while they fit.
    Ticket* first = head_;
    Ticket* last = nullptr;
    int64_t rows = 0;
    for (Ticket* t = head_; t != nullptr && rows + t->rows <= options_.max_batch; t = t->next) {
      rows += t->rows;
      last = t;
    }
    head_ = last->next;
    if (head_ == nullptr) tail_ = nullptr;
    last->next = nullptr;
    queued_rows_ -= rows;
    lock.unlock();
    RunBatch(first, rows);
    lock.lock();
  }
}

void DynamicBatcher::RunBatch(Ticket* first, int64_t rows) {
  std::shared_ptr<const ServingModel> model;
  {
    std::lock_guard lock(mu_);
    model = current_;  // this batch runs on this version to the end, whatever Swap() does
  }
  Status st;
  if (!model || !model->executable) {
    st = Unavailable("no model loaded");
  } else if (first->next == nullptr) {
    // A batch of one request runs on its own buffers: no copy.
    st = model->executable->Run({first->input, first->output, rows});
  } else {
    size_t in_values = 0, out_values = 0;
    for (Ticket* t = first; t; t = t->next) {
      in_values += t->input.size();
      out_values += t->output.size();
    }
    if (batch_in_.size() < in_values) batch_in_.resize(in_values);
    if (batch_out_.size() < out_values) batch_out_.resize(out_values);
    size_t at = 0;
    for (Ticket* t = first; t; t = t->next) {
      std::memcpy(batch_in_.data() + at, t->input.data(), t->input.size_bytes());
      at += t->input.size();
    }
    st = model->executable->Run({std::span<const float>(batch_in_.data(), in_values),
                                 std::span<float>(batch_out_.data(), out_values), rows});
    if (st.ok()) {
      at = 0;
      for (Ticket* t = first; t; t = t->next) {
        std::memcpy(t->output.data(), batch_out_.data() + at, t->output.size_bytes());
        at += t->output.size();
      }
    }
  }
  batches_.fetch_add(1, std::memory_order_relaxed);
  rows_.fetch_add(static_cast<uint64_t>(rows), std::memory_order_relaxed);
  histogram_[rows].fetch_add(1, std::memory_order_relaxed);
  if (!st.ok()) failed_batches_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t version = model ? model->version : 0;
  for (Ticket* t = first; t;) {
    Ticket* next = t->next;  // read before release: the ticket dies with its request
    if (!st.ok()) t->status = st;
    t->version = version;
    t->done.release();
    t = next;
  }
}

}  // namespace shoal
