#include "shoal/fl/coordinator/checkpoint_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shoal/common/stop_signal.h"

namespace shoal {

Status WriteFileAtomic(const std::string& path, const void* data, size_t n) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  for (size_t left = n; left > 0;) {
    const ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return Internal("cannot write " + tmp + ": " + std::strerror(err));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Internal("rename " + tmp + ": " + std::strerror(err));
  }
  return Status::Ok();
}

std::string ModelFile(uint64_t version) {
  return "model." + std::to_string(version) + ".safetensors";
}

std::string OptimizerFile(uint64_t version) {
  return "optimizer." + std::to_string(version) + ".bin";
}

CheckpointWriter::CheckpointWriter(std::chrono::milliseconds delay) : delay_(delay) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointWriter::~CheckpointWriter() {
  SignalStop(mu_, stopping_, wake_);
  thread_.join();
}

uint64_t CheckpointWriter::Enqueue(Item item) {
  uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    ticket = next_ticket_++;
    undone_.insert(ticket);
    queue_.push_back({ticket, std::chrono::steady_clock::now(), std::move(item), {}, {}});
  }
  wake_.notify_all();
  return ticket;
}

void CheckpointWriter::Wait(uint64_t ticket) {
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return undone_.empty() || *undone_.begin() > ticket; });
}

void CheckpointWriter::Flush() {
  uint64_t last;
  {
    std::lock_guard lock(mu_);
    last = next_ticket_ - 1;
  }
  Wait(last);
}

uint64_t CheckpointWriter::written() const {
  std::lock_guard lock(mu_);
  return written_;
}

uint64_t CheckpointWriter::superseded() const {
  std::lock_guard lock(mu_);
  return superseded_;
}

void CheckpointWriter::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const Item& front = queue_.front().item;
    if (!stopping_ && delay_.count() > 0 && front.model && front.version > 0) {
      const auto due = queue_.front().at + delay_;
      if (std::chrono::steady_clock::now() < due) {
        wake_.wait_until(lock, due, [this] { return stopping_; });
        continue;
      }
    }
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    // A later item of the same job makes this one's files unnecessary when it writes a model
    // (a newer version with its state), or when this one is state only. This one is then done
    // when that one is written: its ticket and callbacks go with it, in queue order.
    Queued* by = nullptr;
    for (Queued& later : queue_) {
      if (later.item.dir == q.item.dir && (later.item.model || !q.item.model)) {
        by = &later;
        break;
      }
    }
    if (by != nullptr) {
      by->covers.insert(by->covers.end(), q.covers.begin(), q.covers.end());
      by->covers.push_back(q.ticket);
      for (auto& cb : q.covered_callbacks) by->covered_callbacks.push_back(std::move(cb));
      if (q.item.on_durable) by->covered_callbacks.push_back(std::move(q.item.on_durable));
      ++superseded_;
      continue;
    }
    lock.unlock();
    Write(q.item);
    for (auto& cb : q.covered_callbacks) cb();
    if (q.item.on_durable) q.item.on_durable();
    lock.lock();
    ++written_;
    for (uint64_t t : q.covers) undone_.erase(t);
    undone_.erase(q.ticket);
    done_.notify_all();
  }
}

void CheckpointWriter::Write(const Item& item) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  std::filesystem::create_directories(item.dir, ec);
  // The model and the optimizer of the version first, in files named by it, then the state
  // that names the version, then the files of older versions go: whenever it crashes, the
  // version state.json names has its files.
  if (item.model) {
    if (Status st = WriteFileAtomic(item.dir + "/" + ModelFile(item.version), item.model->data(),
                                    item.model->size());
        !st.ok()) {
      spdlog::error("fl job {}: checkpoint: {}", item.job, st.ToString());
      return;  // state.json keeps naming the version before
    }
  }
  if (item.optimizer) {
    if (Status st = WriteFileAtomic(item.dir + "/" + OptimizerFile(item.version),
                                    item.optimizer->data(), item.optimizer->size());
        !st.ok()) {
      spdlog::error("fl job {}: checkpoint: {}", item.job, st.ToString());
      return;
    }
  }
  if (Status st = WriteFileAtomic(item.dir + "/state.json", item.state.data(), item.state.size());
      !st.ok()) {
    spdlog::error("fl job {}: checkpoint: {}", item.job, st.ToString());
    return;
  }
  if (item.model) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(item.dir, ec)) {
      const std::string name = e.path().filename().string();
      const bool model = name.starts_with("model.") && name.ends_with(".safetensors");
      const bool opt = name.starts_with("optimizer.") && name.ends_with(".bin");
      if ((model && name != ModelFile(item.version)) ||
          (opt && name != OptimizerFile(item.version))) {
        std::filesystem::remove(e.path(), ec);
      }
    }
  }
  if (item.model) {
    spdlog::info(
        "fl job {}: version {} checkpointed behind its commit in {:.1f} ms ({:.1f} MB)", item.job,
        item.version,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
        static_cast<double>(item.model->size()) / 1e6);
  }
}

}  // namespace shoal
