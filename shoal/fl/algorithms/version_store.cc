#include "shoal/fl/algorithms/version_store.h"

#include <string>

namespace shoal::aggregator {

Status VersionStore::Put(uint64_t version, ModelVersion weights) {
  if (!weights) return InvalidArgument("model version " + std::to_string(version) + " is null");
  if (!kept_.empty() && version <= kept_.back().first) {
    return InvalidArgument("model version " + std::to_string(version) +
                           " is not newer than the current version " +
                           std::to_string(kept_.back().first));
  }
  kept_.emplace_back(version, std::move(weights));
  while (kept_.front().first + limit_ < version) kept_.pop_front();
  return Status::Ok();
}

Status VersionStore::Put(uint64_t version, std::vector<float> weights) {
  return Put(version, std::make_shared<const std::vector<float>>(std::move(weights)));
}

Status VersionStore::CheckBase(uint64_t base_version) const {
  if (kept_.empty()) return InvalidArgument("no model version has been committed yet");
  const uint64_t current = kept_.back().first;
  if (base_version > current) {
    return InvalidArgument("base version " + std::to_string(base_version) +
                           " is newer than the current version " + std::to_string(current));
  }
  if (current - base_version > limit_) {
    return InvalidArgument("base version " + std::to_string(base_version) +
                           " is older than the staleness limit (current " +
                           std::to_string(current) + ", limit " + std::to_string(limit_) + ")");
  }
  return Status::Ok();
}

Result<ModelVersion> VersionStore::Get(uint64_t version) const {
  SHOAL_RETURN_IF_ERROR(CheckBase(version));
  for (const auto& [v, w] : kept_) {
    if (v == version) return w;
  }
  return NotFound("model version " + std::to_string(version) + " was never committed");
}

}  // namespace shoal::aggregator
