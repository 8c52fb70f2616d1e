#include "shoal/fl/coordinator/client_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "shoal/common/file_io.h"

namespace shoal::coordinator_internal {

ClientLog::~ClientLog() {
  if (fd_ >= 0) close(fd_);
}

Status ClientLog::Open(const std::string& dir) {
  if (fd_ >= 0) close(fd_);
  fd_ = open(Path(dir).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  return fd_ < 0 ? ErrnoStatus("opening " + Path(dir), errno) : Status::Ok();
}

Status ClientLog::Append(std::string_view lines) {
  if (fd_ < 0) return Internal("the client log is not open");
  const ssize_t w = write(fd_, lines.data(), lines.size());
  if (w == static_cast<ssize_t>(lines.size())) return Status::Ok();
  const int err = errno;
  if (w > 0) {
    // A short write (disk full): the partial line goes, so that the next append starts a
    // line; where it cannot, nothing more is appended after it.
    const off_t end = lseek(fd_, 0, SEEK_END);
    if (end < w || ftruncate(fd_, end - w) != 0) {
      close(fd_);
      fd_ = -1;
    }
    return Internal("appending to the client log: short write");
  }
  return ErrnoStatus("appending to the client log", err);
}

Status ClientLog::Rewrite(const std::string& dir, const std::string& lines) {
  SHOAL_RETURN_IF_ERROR(WriteFileAtomic(Path(dir), lines));
  figure_lines_ = 0;
  return Open(dir);
}

}  // namespace shoal::coordinator_internal
