#include "shoal/runtime/sandbox/tenant_ids.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "shoal/common/file_io.h"

namespace shoal {

TenantIds::TenantIds(TenantIds&& o) noexcept
    : path_(std::move(o.path_)),
      base_(o.base_),
      count_(o.count_),
      fixed_(std::move(o.fixed_)),
      allocated_(std::move(o.allocated_)) {}

Result<TenantIds> TenantIds::Open(const NodeConfig& config) {
  TenantIds ids;
  ids.path_ = config.state_dir + "/tenants.yaml";
  ids.base_ = config.tenant_uid_base;
  ids.count_ = config.tenant_uid_count;
  for (const auto& [name, t] : config.tenants) ids.fixed_[name] = TenantId{t.uid, t.gid};
  const std::optional<std::string> text = ReadFileBytes(ids.path_);
  if (!text) return ids;
  try {
    YAML::Node root = YAML::Load(*text);
    if (root.IsMap()) {
      for (const auto& kv : root) {
        TenantId id{kv.second["uid"].as<uid_t>(), kv.second["gid"].as<gid_t>()};
        if (id.uid == 0 || id.gid == 0) {
          return InvalidArgument(ids.path_ + ": tenant '" + kv.first.Scalar() + "' has id 0");
        }
        ids.allocated_[kv.first.Scalar()] = id;
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(ids.path_ + ": " + e.what());
  }
  return ids;
}

Result<TenantId> TenantIds::For(const std::string& tenant) {
  std::lock_guard lock(mu_);
  if (auto it = fixed_.find(tenant); it != fixed_.end()) return it->second;
  if (auto it = allocated_.find(tenant); it != allocated_.end()) return it->second;
  std::set<uid_t> taken;
  for (const auto& [n, id] : allocated_) taken.insert(id.uid);
  for (const auto& [n, id] : fixed_) taken.insert(id.uid);
  for (uint32_t i = 0; i < count_; ++i) {
    const uid_t uid = base_ + i;
    if (uid == 0 || taken.count(uid)) continue;
    allocated_[tenant] = TenantId{uid, static_cast<gid_t>(uid)};
    if (Status st = Persist(); !st.ok()) {
      allocated_.erase(tenant);
      return st;
    }
    return allocated_[tenant];
  }
  return ResourceExhausted("tenant '" + tenant + "': no free uid in " + std::to_string(base_) +
                           ".." + std::to_string(base_ + count_ - 1) +
                           " (config tenant_uid_base, tenant_uid_count)");
}

Status TenantIds::Persist() const {
  YAML::Emitter e;
  e << YAML::BeginMap;
  for (const auto& [name, id] : allocated_) {
    e << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "uid"
      << YAML::Value << id.uid << YAML::Key << "gid" << YAML::Value << id.gid << YAML::EndMap;
  }
  e << YAML::EndMap;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  const std::string tmp = path_ + ".tmp";
  const std::string text = std::string(e.c_str()) + "\n";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("open " + tmp, errno);
  const bool ok =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return ErrnoStatus("write " + tmp, err);
  if (rename(tmp.c_str(), path_.c_str()) != 0) return ErrnoStatus("rename " + tmp, errno);
  return {};
}

}  // namespace shoal
