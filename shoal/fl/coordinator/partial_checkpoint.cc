#include "shoal/fl/coordinator/partial_checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace shoal {
namespace {

constexpr uint32_t kMagic = 0x53504853;    // "SHPS"
constexpr uint32_t kTrailer = 0x45504853;  // "SHPE": the sum is whole
constexpr uint32_t kFormat = 1;

struct FileHead {
  uint32_t magic = kMagic;
  uint32_t format = kFormat;
  uint64_t round = 0, key = 0, base = 0, num_params = 0, num_seqs = 0;
};
static_assert(sizeof(FileHead) == 48);

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Internal("cannot write " + path + ": " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status WriteTo(int fd, const PartialCheckpointHead& h, const float* sum, const std::string& tmp) {
  FileHead fh;
  fh.round = h.round;
  fh.key = h.key;
  fh.base = h.base;
  fh.num_params = h.num_params;
  fh.num_seqs = h.seqs.size();
  SHOAL_RETURN_IF_ERROR(WriteAll(fd, &fh, sizeof fh, tmp));
  SHOAL_RETURN_IF_ERROR(WriteAll(fd, h.seqs.data(), h.seqs.size() * sizeof(uint64_t), tmp));
  SHOAL_RETURN_IF_ERROR(WriteAll(fd, sum, h.num_params * sizeof(float), tmp));
  return WriteAll(fd, &kTrailer, sizeof kTrailer, tmp);
}

// fsync the file, rename it into place, fsync the directory (the rename itself).
Status Finish(int fd, const std::string& tmp, const std::string& path, const std::string& dir) {
  const bool synced = fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!synced) {
    unlink(tmp.c_str());
    return Internal("fsync " + tmp + ": " + std::strerror(err));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return Internal("rename " + tmp + ": " + std::strerror(e));
  }
  if (const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::Ok();
}

Result<int> OpenTmp(const std::string& tmp) {
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

std::string PartialCheckpointFile(uint64_t round, uint64_t key) {
  return "partial-" + std::to_string(round) + "-" + std::to_string(key) + ".sum";
}

std::vector<std::string> ListPartialCheckpoints(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("partial-") && name.ends_with(".sum")) out.push_back(e.path().string());
  }
  return out;
}

void RemovePartialCheckpoints(const std::string& dir, uint64_t round) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("partial-")) continue;
    if (name.ends_with(".tmp")) {
      std::filesystem::remove(e.path(), ec);
      continue;
    }
    const uint64_t r = std::strtoull(name.c_str() + 8, nullptr, 10);
    if (name.ends_with(".sum") && r <= round) std::filesystem::remove(e.path(), ec);
  }
}

Result<PartialCheckpointHead> ReadPartialCheckpoint(const std::string& path, uint64_t num_params,
                                                    float* into) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot read " + path + ": " + std::strerror(errno));
  struct stat st {};
  FileHead fh;
  const bool head_ok = fstat(fd, &st) == 0 && pread(fd, &fh, sizeof fh, 0) == sizeof fh &&
                       fh.magic == kMagic && fh.format == kFormat && fh.num_params == num_params;
  const uint64_t seq_bytes = fh.num_seqs * sizeof(uint64_t);
  const uint64_t want = sizeof fh + seq_bytes + num_params * sizeof(float) + sizeof kTrailer;
  if (!head_ok || fh.num_seqs > (uint64_t{1} << 32) || static_cast<uint64_t>(st.st_size) != want) {
    close(fd);
    return Internal("partial-sum checkpoint " + path + " is not a whole checkpoint of " +
                    std::to_string(num_params) + " parameters");
  }
  PartialCheckpointHead h;
  h.round = fh.round;
  h.key = fh.key;
  h.base = fh.base;
  h.num_params = fh.num_params;
  h.seqs.resize(fh.num_seqs);
  bool ok = pread(fd, h.seqs.data(), seq_bytes, sizeof fh) == static_cast<ssize_t>(seq_bytes);
  uint32_t trailer = 0;
  ok = ok &&
       pread(fd, &trailer, sizeof trailer, static_cast<off_t>(want - sizeof trailer)) ==
           sizeof trailer &&
       trailer == kTrailer;
  if (ok && into != nullptr) {
    char* p = reinterpret_cast<char*>(into);
    uint64_t left = num_params * sizeof(float);
    off_t at = static_cast<off_t>(sizeof fh + seq_bytes);
    while (ok && left > 0) {
      const ssize_t r = pread(fd, p, left, at);
      ok = r > 0;
      if (!ok) break;
      p += r;
      at += r;
      left -= static_cast<uint64_t>(r);
    }
  }
  close(fd);
  if (!ok) return Internal("partial-sum checkpoint " + path + ": short read");
  return h;
}

Status WritePartialCheckpoint(const std::string& dir, const PartialCheckpointHead& head,
                              const float* sum) {
  const std::string path = dir + "/" + PartialCheckpointFile(head.round, head.key);
  const std::string tmp = path + ".commit.tmp";
  auto fd = OpenTmp(tmp);
  if (!fd.ok()) return fd.status();
  if (Status st = WriteTo(*fd, head, sum, tmp); !st.ok()) {
    close(*fd);
    unlink(tmp.c_str());
    return st;
  }
  return Finish(*fd, tmp, path, dir);
}

PartialCheckpointWriter::PartialCheckpointWriter() {
  thread_ = std::thread([this] { Loop(); });
}

PartialCheckpointWriter::~PartialCheckpointWriter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Status PartialCheckpointWriter::Begin(const std::string& dir, const PartialCheckpointHead& head,
                                      const float* sum, std::function<void()> on_durable) {
  uint64_t n;
  {
    std::lock_guard lock(mu_);
    n = next_tmp_++;
  }
  Pending p;
  p.dir = dir;
  p.path = dir + "/" + PartialCheckpointFile(head.round, head.key);
  p.tmp = p.path + "." + std::to_string(n) + ".tmp";
  auto fd = OpenTmp(p.tmp);
  if (!fd.ok()) return fd.status();
  if (Status st = WriteTo(*fd, head, sum, p.tmp); !st.ok()) {
    close(*fd);
    unlink(p.tmp.c_str());
    return st;
  }
  p.fd = *fd;
  p.on_durable = std::move(on_durable);
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(p));
    ++begun_;
  }
  wake_.notify_all();
  return Status::Ok();
}

void PartialCheckpointWriter::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t want = begun_;
  done_.wait(lock, [&] { return finished_ >= want; });
}

void PartialCheckpointWriter::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (Status st = Finish(p.fd, p.tmp, p.path, p.dir); !st.ok()) {
      spdlog::error("partial-sum checkpoint: {}", st.ToString());
    } else if (p.on_durable) {
      p.on_durable();
    }
    lock.lock();
    ++finished_;
    done_.notify_all();
  }
}

}  // namespace shoal
