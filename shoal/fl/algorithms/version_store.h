// The last committed global models, kept so Δ-based algorithms can compute Δ_k = w_k − w_{τ_k}
// for an update trained from an older version τ_k. Versions are shared by value
// (shared_ptr<const>): a reader keeps its version alive while the store moves on.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::aggregator {

using ModelVersion = std::shared_ptr<const std::vector<float>>;

class VersionStore {
 public:
  // Keeps versions current − staleness_limit ... current (staleness_limit + 1 of them); an update
  // with staleness u = current − τ > staleness_limit is refused.
  explicit VersionStore(uint64_t staleness_limit) : limit_(staleness_limit) {}

  // Records a newly committed version; it must be newer than every kept one. Drops versions
  // that fell out of the window.
  Status Put(uint64_t version, ModelVersion weights);
  Status Put(uint64_t version, std::vector<float> weights);

  // OK if an update trained from base_version may be accepted now: kInvalidArgument
  // "base version 3 is older than the staleness limit (current 10, limit 5)", or for a base
  // newer than current, or when no version was ever put.
  Status CheckBase(uint64_t base_version) const;

  // The kept model of that version (CheckBase's errors, or kNotFound if it was never put).
  Result<ModelVersion> Get(uint64_t version) const;

  bool empty() const { return kept_.empty(); }
  uint64_t current() const { return kept_.empty() ? 0 : kept_.back().first; }
  uint64_t staleness_limit() const { return limit_; }
  size_t size() const { return kept_.size(); }

 private:
  uint64_t limit_;
  std::deque<std::pair<uint64_t, ModelVersion>> kept_;  // ascending versions
};

}  // namespace shoal::aggregator
