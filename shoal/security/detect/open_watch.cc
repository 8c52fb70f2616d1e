#include "shoal/security/detect/open_watch.h"

#include <fcntl.h>
#include <sys/capability.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace shoal {
namespace {

// Filesystems without files a function could read or that fanotify cannot mark usefully.
bool Pseudo(const std::string& type) {
  static const std::set<std::string> kPseudo = {
      "proc",      "sysfs",      "cgroup",  "cgroup2",    "bpf",         "devpts",
      "mqueue",    "debugfs",    "tracefs", "securityfs", "nsfs",        "hugetlbfs",
      "fusectl",   "configfs",   "pstore",  "autofs",     "binfmt_misc", "efivarfs",
      "selinuxfs", "rpc_pipefs", "pipefs",  "sockfs",     "devtmpfs"};
  return kPseudo.count(type) > 0;
}

// "\040" in mountinfo's paths is a space (and so on: octal escapes).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s.find_first_not_of("01234567", i + 1) >= i + 4) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<OpenWatch>> OpenWatch::Start() {
  // Asked first, so that a node started without it (the Kubernetes DaemonSet's set) says so
  // rather than reporting a refused call.
  cap_t caps = cap_get_proc();
  cap_flag_value_t admin = CAP_CLEAR;
  if (caps != nullptr) cap_get_flag(caps, CAP_SYS_ADMIN, CAP_EFFECTIVE, &admin);
  cap_free(caps);
  if (admin != CAP_SET) {
    return PermissionDenied("shoald does not hold CAP_SYS_ADMIN, which fanotify's marks need");
  }
  std::unique_ptr<OpenWatch> w(new OpenWatch());
  w->fd_ = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_LARGEFILE);
  if (w->fd_ < 0) {
    const int err = errno;
    Status st = ErrnoStatus("fanotify_init", err);
    if (err == EPERM) return PermissionDenied(st.message() + " (needs CAP_SYS_ADMIN)");
    return st;
  }
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return ErrnoStatus("read /proc/self/mountinfo", errno);
  std::set<dev_t> done;
  std::string line, refused;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - type source super-options
    std::istringstream f(line);
    std::string id, parent, devno, root, point, word, type;
    if (!(f >> id >> parent >> devno >> root >> point)) continue;
    while (f >> word && word != "-") {
    }
    if (!(f >> type) || Pseudo(type)) continue;
    point = Unescape(point);
    struct stat st {};
    if (stat(point.c_str(), &st) != 0 || !done.insert(st.st_dev).second) continue;
    if (fanotify_mark(w->fd_, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN | FAN_OPEN_EXEC,
                      AT_FDCWD, point.c_str()) != 0) {
      refused += (refused.empty() ? "" : ", ") + point + " (" + type + "): " + std::strerror(errno);
      continue;
    }
    w->marked_.push_back(point);
  }
  if (w->marked_.empty()) {
    return Unavailable("fanotify could mark no filesystem" +
                       (refused.empty() ? std::string() : ": " + refused));
  }
  return w;
}

OpenWatch::~OpenWatch() {
  if (fd_ >= 0) close(fd_);
}

size_t OpenWatch::Drain(
    const std::function<uint64_t(int pid)>& owner,
    const std::function<void(uint64_t owner, int pid, std::string_view path)>& sink) {
  alignas(fanotify_event_metadata) char buf[16384];
  char link[32], path[4096];
  size_t opens = 0;
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) break;  // EAGAIN: drained
    ssize_t len = n;
    for (auto* m = reinterpret_cast<fanotify_event_metadata*>(buf); FAN_EVENT_OK(m, len);
         m = FAN_EVENT_NEXT(m, len)) {
      if (m->vers != FANOTIFY_METADATA_VERSION) continue;
      if (m->mask & FAN_Q_OVERFLOW) ++overflows_;
      if (m->fd < 0) continue;
      if ((m->mask & FAN_OPEN) && !(m->mask & FAN_OPEN_EXEC)) {
        ++opens;
        if (const uint64_t who = owner(m->pid); who != 0) {
          std::snprintf(link, sizeof link, "/proc/self/fd/%d", m->fd);
          const ssize_t l = readlink(link, path, sizeof path);
          if (l > 0 && static_cast<size_t>(l) < sizeof path) {
            sink(who, m->pid, std::string_view(path, static_cast<size_t>(l)));
          }
        }
      }
      close(m->fd);
    }
  }
  opens_ += opens;
  return opens;
}

}  // namespace shoal
