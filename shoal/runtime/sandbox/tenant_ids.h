// TenantIds: the uid/gid each tenant's (metadata.namespace's) instances run as. Fixed ones
// come from the config (`tenants:`); any other tenant gets the next free id of the configured
// range (`tenant_uid_base`, `tenant_uid_count`, gid = uid), recorded in
// <state_dir>/tenants.yaml so that a tenant keeps its id across restarts (its pool segment and
// any files it wrote stay its own). Never 0.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <string>

#include "shoal/common/config.h"
#include "shoal/common/status.h"

namespace shoal {

struct TenantId {
  uid_t uid = 0;
  gid_t gid = 0;
};

class TenantIds {
 public:
  // Loads the persisted allocations (a missing file is an empty one).
  static Result<TenantIds> Open(const NodeConfig& config);

  // The tenant's ids, allocating and persisting them on first use.
  Result<TenantId> For(const std::string& tenant);

  TenantIds(TenantIds&& o) noexcept;

 private:
  TenantIds() = default;
  Status Persist() const;

  std::string path_;
  uint32_t base_ = 0;
  uint32_t count_ = 0;
  std::map<std::string, TenantId> fixed_;      // from the config
  std::map<std::string, TenantId> allocated_;  // from the range, persisted
  std::mutex mu_;
};

}  // namespace shoal
