#include "shoal/fl/coordinator/update_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "shoal/common/log.h"

namespace shoal::coordinator_internal {
namespace {

bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

UpdateLog::~UpdateLog() {
  if (fd_ >= 0) close(fd_);
}

Status UpdateLog::Open(const std::string& dir) {
  std::lock_guard lock(mu_);
  return OpenLocked(dir);
}

Status UpdateLog::Append(const LogRecord& r) {
  std::lock_guard lock(mu_);
  if (write(fd_, &r, sizeof r) != static_cast<ssize_t>(sizeof r)) {
    return ErrnoStatus("appending to the update log", errno);
  }
  if (compacting_) tail_.append(reinterpret_cast<const char*>(&r), sizeof r);
  return Status::Ok();
}

void UpdateLog::BeginRewrite() {
  std::lock_guard lock(mu_);
  compacting_ = true;
  tail_.clear();
}

void UpdateLog::FinishRewrite(const std::string& job, const std::string& dir,
                              const std::string& bytes) {
  const std::string path = dir + "/updates.log", tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && WriteAll(fd, bytes) && fsync(fd) == 0;
  int err = ok ? 0 : errno;
  std::lock_guard lock(mu_);
  compacting_ = false;
  if (ok && !WriteAll(fd, tail_)) {  // in the page cache, as every append
    ok = false;
    err = errno;
  }
  tail_.clear();
  if (fd >= 0) close(fd);
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp.c_str());
    spdlog::error("fl job {}: update log: {}", job,
                  ErrnoStatus("compacting " + path, err).ToString());
    return;
  }
  if (Status st = OpenLocked(dir); !st.ok()) {
    spdlog::error("fl job {}: reopening the compacted update log: {}", job, st.ToString());
  }
}

Status UpdateLog::OpenLocked(const std::string& dir) {
  if (fd_ >= 0) close(fd_);
  fd_ = open((dir + "/updates.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  return fd_ < 0 ? ErrnoStatus("opening " + dir + "/updates.log", errno) : Status::Ok();
}

}  // namespace shoal::coordinator_internal
