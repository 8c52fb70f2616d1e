#include "shoal/runtime/sandbox/cgroup_freezer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "shoal/common/file_io.h"
#include "shoal/common/log.h"

namespace shoal {
namespace {

std::string ReadAll(const std::string& path) { return ReadFileBytes(path).value_or(""); }

// Polls `check` for up to a second.
template <typename F>
bool WaitFor(F check) {
  for (int i = 0; i < 200; ++i) {
    if (check()) return true;
    usleep(5000);
  }
  return check();
}

}  // namespace

Result<std::unique_ptr<FrozenCgroup>> FrozenCgroup::Freeze(const InstanceCgroup& cg,
                                                           const std::string& version,
                                                           const std::string& name) {
  using cgroup_detail::WriteFile;
  if (cg.dirs().empty()) return Unavailable("the instance has no cgroup to freeze");
  if (version == "v2") {
    const std::string dir = cg.dirs().front();
    SHOAL_RETURN_IF_ERROR(WriteFile(dir + "/cgroup.freeze", "1"));
    std::unique_ptr<FrozenCgroup> f(new FrozenCgroup(dir, true));
    if (!WaitFor([&] {
          return ReadAll(dir + "/cgroup.events").find("frozen 1") != std::string::npos;
        })) {
      return Internal("cgroup " + dir + " did not report frozen within a second");
    }
    return f;
  }
  auto mount = cgroup_detail::FindMount("freezer");
  if (!mount.ok()) {
    return Unavailable("no v1 freezer hierarchy to quarantine in: " + mount.status().message());
  }
  const std::string parent = mount->own_dir + "/shoal-quarantine";
  if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir " + parent, errno);
  const std::string dir = parent + "/" + name;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dir, errno);
  std::unique_ptr<FrozenCgroup> f(new FrozenCgroup(dir, false));
  // Freeze the (empty) directory first, then move the processes in: each one is frozen as it
  // arrives, so none runs on between the moves.
  SHOAL_RETURN_IF_ERROR(WriteFile(dir + "/freezer.state", "FROZEN"));
  std::istringstream pids(ReadAll(cg.dirs().front() + "/cgroup.procs"));
  int moved = 0;
  for (std::string pid; pids >> pid;) {
    Status st = WriteFile(dir + "/cgroup.procs", pid);
    if (st.ok())
      ++moved;
    else if (st.message().find("No such process") == std::string::npos)
      return st;
  }
  if (moved == 0)
    return Unavailable("the instance's cgroup " + cg.dirs().front() + " has no process");
  if (!WaitFor([&] { return ReadAll(dir + "/freezer.state").rfind("FROZEN", 0) == 0; })) {
    return Internal("freezer cgroup " + dir + " did not reach FROZEN within a second");
  }
  return f;
}

Status FrozenCgroup::Thaw() {
  if (!frozen_) return Status::Ok();
  frozen_ = false;
  if (v2_) return cgroup_detail::WriteFile(dir_ + "/cgroup.freeze", "0");
  return cgroup_detail::WriteFile(dir_ + "/freezer.state", "THAWED");
}

FrozenCgroup::~FrozenCgroup() {
  if (Status st = Thaw(); !st.ok()) spdlog::warn("cgroup: thaw {}: {}", dir_, st.message());
  if (v2_) return;  // the instance's own cgroup: its owner removes it
  int rc = rmdir(dir_.c_str());
  for (int i = 0; rc != 0 && errno == EBUSY && i < 20; ++i) {
    usleep(500);
    rc = rmdir(dir_.c_str());
  }
  if (rc != 0 && errno != ENOENT)
    spdlog::warn("cgroup: cannot remove {}: {}", dir_, std::strerror(errno));
}

}  // namespace shoal
