#include "shoal/dataplane/pool/hugepages.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <mutex>
#include <sstream>

namespace shoal {
namespace {

constexpr const char* kDefaultMount = "/dev/hugepages";

Result<uint64_t> ReadCount(const std::string& file) {
  std::ifstream in(std::string(kHugepagesSysfs) + "/" + file);
  uint64_t v = 0;
  if (!(in >> v)) {
    return NotFound(std::string(kHugepagesSysfs) + "/" + file +
                    " is unreadable: this kernel has no 2 MiB hugepages");
  }
  return v;
}

// A hugetlbfs line of /proc/mounts whose page size is 2 MiB (no pagesize= option means the
// default size, 2 MiB on x86-64 and arm64).
bool Is2MiBHugetlbfs(const std::string& type, const std::string& options) {
  if (type != "hugetlbfs") return false;
  const auto at = options.find("pagesize=");
  if (at == std::string::npos) return true;
  const std::string size = options.substr(at + 9, options.find(',', at) - at - 9);
  return size == "2M" || size == "2048k" || size == "2097152";
}

Result<std::string> FindOrMountHugetlbfs() {
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string dev, dir, type, options;
    fields >> dev >> dir >> type >> options;
    if (Is2MiBHugetlbfs(type, options) && access(dir.c_str(), R_OK | X_OK) == 0) return dir;
  }
  if (geteuid() != 0) {
    return NotFound("no 2 MiB hugetlbfs is mounted and only root can mount one (mount -t " +
                    std::string("hugetlbfs -o pagesize=2M nodev ") + kDefaultMount + ")");
  }
  if (mkdir(kDefaultMount, 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(std::string("mkdir ") + kDefaultMount, errno);
  }
  if (mount("nodev", kDefaultMount, "hugetlbfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "pagesize=2M,mode=0755") != 0) {
    return ErrnoStatus(std::string("mounting hugetlbfs at ") + kDefaultMount, errno);
  }
  return std::string(kDefaultMount);
}

}  // namespace

Result<HugepageCounts> ReadHugepageCounts() {
  auto total = ReadCount("nr_hugepages");
  if (!total.ok()) return total.status();
  auto free = ReadCount("free_hugepages");
  if (!free.ok()) return free.status();
  auto reserved = ReadCount("resv_hugepages");
  if (!reserved.ok()) return reserved.status();
  HugepageCounts c;
  c.total = *total;
  c.free = *free > *reserved ? *free - *reserved : 0;
  return c;
}

Result<std::string> HugetlbfsDir() {
  static std::mutex mu;
  static std::string found;
  std::lock_guard lock(mu);
  if (!found.empty()) return found;
  auto dir = FindOrMountHugetlbfs();
  if (dir.ok()) found = *dir;
  return dir;
}

Result<uint64_t> ReserveHugepages(uint64_t pages) {
  auto now = ReadHugepageCounts();
  if (!now.ok()) return now.status();
  if (now->total >= pages) return now->total;
  const std::string path = std::string(kHugepagesSysfs) + "/nr_hugepages";
  {
    std::ofstream out(path);
    out << pages;
    out.flush();
    if (!out) {
      return PermissionDenied("cannot write " + path + " (" +
                              (geteuid() == 0 ? "the kernel refused" : "not root") + ")");
    }
  }
  auto after = ReadHugepageCounts();
  if (!after.ok()) return after.status();
  return after->total;
}

}  // namespace shoal
