#include "shoal/runtime/sandbox/seccomp_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "shoal/runtime/sandbox/seccomp_policy.h"
#include "shoal/runtime/sandbox/unique_fd.h"

namespace shoal {

std::string SeccompKillSyscall(pid_t pid) {
  UniqueFd fd(open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return {};
  const std::string want = " pid=" + std::to_string(pid) + " ";
  long nr = -1;
  char rec[8192];  // one record per read
  for (;;) {
    const ssize_t n = read(fd.get(), rec, sizeof rec - 1);
    if (n < 0 && errno == EPIPE) continue;  // overwritten records: skip on
    if (n <= 0) break;
    std::string_view r(rec, static_cast<size_t>(n));
    if (r.find("type=1326") == std::string_view::npos || r.find(want) == std::string_view::npos) {
      continue;
    }
    const size_t at = r.find(" syscall=");
    if (at == std::string_view::npos) continue;
    nr = std::strtol(std::string(r.substr(at + 9, 8)).c_str(), nullptr, 10);
  }
  if (nr < 0) return {};
  const std::string name = SyscallName(static_cast<int>(nr));
  return (name.empty() ? "syscall" : name) + " (" + std::to_string(nr) + ")";
}

}  // namespace shoal
