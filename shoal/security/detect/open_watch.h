// OpenWatch: the files a node's processes open, from fanotify, for the compromise detector's
// never-seen-file rule without a per-syscall hook (detect_syscalls: sampled). It marks every
// filesystem the node has mounted that holds files (not proc, sysfs, cgroup, bpf, ...) with
// FAN_MARK_FILESYSTEM for FAN_OPEN | FAN_OPEN_EXEC: only an open pays (the kernel queues an
// event; no other syscall is touched), and the reader gets an fd of the opened file, whose path
// it reads from /proc/self/fd. An exec's open (FAN_OPEN_EXEC) is skipped: execs are the exec
// rule's. What it cannot see: an open the kernel refused (fsnotify's event comes after the
// permission check), and files of filesystems mounted after Start. Needs CAP_SYS_ADMIN in the
// initial user namespace; Start says why it cannot.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

class OpenWatch {
 public:
  static Result<std::unique_ptr<OpenWatch>> Start();
  OpenWatch(const OpenWatch&) = delete;
  OpenWatch& operator=(const OpenWatch&) = delete;
  ~OpenWatch();

  int fd() const { return fd_; }
  // The mount points whose filesystems are marked (one per filesystem).
  const std::vector<std::string>& marked() const { return marked_; }

  // Reads every waiting event. For each open (not an exec's) `owner(pid)` says whose the
  // process is (0: nobody watched: the event is dropped without reading its path); for the
  // others `sink(owner, pid, path)`. Returns the opens read. No allocation per event.
  size_t Drain(const std::function<uint64_t(int pid)>& owner,
               const std::function<void(uint64_t owner, int pid, std::string_view path)>& sink);
  // Events the kernel dropped because its queue was full (FAN_Q_OVERFLOW), since Start.
  uint64_t overflows() const { return overflows_; }
  // Opens read since Start (anyone's: what the node's opens cost shoald).
  uint64_t opens() const { return opens_; }

 private:
  OpenWatch() = default;
  int fd_ = -1;
  std::vector<std::string> marked_;
  uint64_t overflows_ = 0;
  uint64_t opens_ = 0;
};

}  // namespace shoal
