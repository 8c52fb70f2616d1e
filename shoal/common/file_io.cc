#include "shoal/common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace shoal {

std::optional<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

Status WriteFileAtomic(const std::string& path, std::string_view bytes, unsigned mode) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus("write " + tmp, errno);
  auto fail = [&](const char* what) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoStatus(std::string(what) + " " + tmp, err);
  };
  if (fchmod(fd, mode) != 0) return fail("chmod");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("write");
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) return fail("fsync");
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus("rename " + tmp + " to " + path, err);
  }
  return Status::Ok();
}

}  // namespace shoal
