// A scratch cgroup for tests that watch a process by its cgroup (the behaviour probes): a
// directory in the v1 memory hierarchy when it is mounted, else in the v2 hierarchy, removed
// when destroyed. Header-only; the tests run as root.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "shoal/dataplane/bpf/behaviour_probes.h"

namespace shoal::bpf_test {

class TestCgroup {
 public:
  explicit TestCgroup(const std::string& name) {
    struct statfs fs {};
    if (statfs("/sys/fs/cgroup/memory", &fs) == 0 &&
        access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0) {
      mode_ = BehaviourProbes::CgroupMode::kV1Memory;
      dir_ = "/sys/fs/cgroup/memory/" + name;
    } else {
      mode_ = BehaviourProbes::CgroupMode::kV2;
      dir_ = "/sys/fs/cgroup/" + name;
    }
    if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
      error_ = "mkdir " + dir_ + ": " + std::strerror(errno);
    }
  }
  ~TestCgroup() {
    // Processes still inside (a failed test) go back to the root first.
    rmdir(dir_.c_str());
  }
  // "" when made.
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  BehaviourProbes::CgroupMode mode() const { return mode_; }
  // Moves the calling process in (async-signal-safe: for a forked child).
  bool Join() const {
    const std::string procs = dir_ + "/cgroup.procs";
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = write(fd, "0", 1) == 1;
    close(fd);
    return ok;
  }

 private:
  std::string dir_;
  std::string error_;
  BehaviourProbes::CgroupMode mode_;
};

}  // namespace shoal::bpf_test
