#include "shoal/runtime/sandbox/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shoal/common/log.h"

namespace shoal {

InstanceCgroup::InstanceCgroup(std::vector<std::string> dirs, std::vector<UniqueFd> procs)
    : dirs_(std::move(dirs)), procs_(std::move(procs)) {}

InstanceCgroup::~InstanceCgroup() {
  procs_.clear();
  for (const auto& d : dirs_) {
    // The process has been reaped; a task still exiting can keep it busy a moment.
    int rc = rmdir(d.c_str());
    for (int i = 0; rc != 0 && errno == EBUSY && i < 20; ++i) {
      usleep(500);
      rc = rmdir(d.c_str());
    }
    if (rc != 0 && errno != ENOENT) {
      spdlog::warn("cgroup: cannot remove {}: {}", d, std::strerror(errno));
    }
  }
}

namespace cgroup_detail {

Status WriteFile(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  const ssize_t n = write(fd, value.data(), value.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size()))
    return ErrnoStatus("write " + path + " = " + value, err);
  return {};
}

Result<Mount> FindMount(const std::string& controller) {
  // /proc/self/cgroup: "N:cpu,cpuacct:/path" (v1), "0::/path" (v2).
  std::ifstream cg("/proc/self/cgroup");
  std::string line, own;
  bool found = false;
  while (std::getline(cg, line)) {
    const auto a = line.find(':');
    const auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1);
    bool match = controller.empty() ? ctrls.empty() && line.substr(0, a) == "0" : false;
    if (!controller.empty()) {
      std::stringstream ss(ctrls);
      std::string c;
      while (std::getline(ss, c, ',')) match = match || c == controller;
    }
    if (match) {
      own = line.substr(b + 1);
      found = true;
      break;
    }
  }
  if (!found) {
    return NotFound(controller.empty() ? std::string("no cgroup v2 hierarchy")
                                       : "no cgroup v1 hierarchy with " + controller);
  }
  // /proc/self/mountinfo: "id parent maj:min root mount-point opts ... - fstype src super".
  std::ifstream mi("/proc/self/mountinfo");
  while (std::getline(mi, line)) {
    std::stringstream ss(line);
    std::string id, parent, dev, root, point;
    ss >> id >> parent >> dev >> root >> point;
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::stringstream rest(line.substr(dash + 3));
    std::string fstype, src, super;
    rest >> fstype >> src >> super;
    bool match = false;
    if (controller.empty()) {
      match = fstype == "cgroup2";
    } else if (fstype == "cgroup") {
      std::stringstream so(super);
      std::string o;
      while (std::getline(so, o, ',')) match = match || o == controller;
    }
    if (!match) continue;
    // A mount of a sub-tree (containers): the process's path is relative to the hierarchy.
    std::string rel = own;
    if (root != "/" && rel.rfind(root, 0) == 0) rel = rel.substr(root.size());
    if (rel == "/") rel.clear();
    return Mount{point, point + rel};
  }
  return NotFound("cgroup hierarchy " + (controller.empty() ? std::string("v2") : controller) +
                  " is not mounted");
}

void RemoveChildren(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec)) continue;
    RemoveChildren(e.path().string());
    if (rmdir(e.path().c_str()) == 0) {
      spdlog::info("cgroup: removed {} (left by a previous shoald)", e.path().string());
    }
  }
}

}  // namespace cgroup_detail

Result<std::unique_ptr<CgroupHierarchy>> OpenCgroups(CgroupMode mode, const std::string& parent,
                                                     const std::string& node) {
  using namespace cgroup_detail;
  if (mode == CgroupMode::kOff) return Unavailable("cgroups are off (config cgroups: off)");
  const std::string rel = (parent.empty() ? "" : "/" + parent) + "/" + node;
  std::string why_v2;
  if (mode == CgroupMode::kAuto || mode == CgroupMode::kV2) {
    auto m = FindMount("");
    if (m.ok()) {
      auto h = MakeV2(m->own_dir, rel);
      if (h.ok()) return std::move(*h);
      why_v2 = h.status().message();
    } else {
      why_v2 = m.status().message();
    }
    if (mode == CgroupMode::kV2) return Unavailable("cgroup v2: " + why_v2);
  }
  std::vector<std::pair<std::string, std::string>> dirs;  // controller, node dir
  std::string why_v1;
  for (const char* c : {"cpu", "memory", "pids"}) {
    auto m = FindMount(c);
    if (!m.ok()) {
      if (std::string(c) != "pids") why_v1 += (why_v1.empty() ? "" : "; ") + m.status().message();
      continue;
    }
    const std::string dir = m->own_dir + rel;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
      why_v1 += (why_v1.empty() ? "" : "; ") + std::string(c) + ": cannot create " + dir +
                (ec ? ": " + ec.message() : "");
      continue;
    }
    RemoveChildren(dir);
    dirs.emplace_back(c, dir);
  }
  if (dirs.empty() || !why_v1.empty()) {
    if (dirs.empty() && why_v1.empty()) why_v1 = "no usable hierarchy";
    std::string msg = "cgroup v1: " + why_v1;
    if (!why_v2.empty()) msg = "cgroup v2: " + why_v2 + "; " + msg;
    // Some hierarchy is usable: go on with those (the log says which limits apply).
    if (dirs.empty()) return Unavailable(msg);
    spdlog::warn("{}", msg);
  }
  return MakeV1(std::move(dirs));
}

}  // namespace shoal
