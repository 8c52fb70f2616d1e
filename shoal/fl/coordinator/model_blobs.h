// A job's committed models as safetensors bytes: the recent versions' blobs, shared with the
// downloads and the checkpoint writer that still send or write them, and the blobs of versions
// no longer kept, reused (their pages warm) once nobody holds them. Guarded by the job's lock;
// the bytes themselves are written without it (WriteModelSafetensors).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/wire/model_spec.h"

namespace shoal::coordinator_internal {

class ModelBlobs {
 public:
  static constexpr size_t kKept = 4;   // versions kept for download
  static constexpr size_t kSpare = 2;  // blobs of versions no longer kept, for the next ones

  // A blob no download and no checkpoint holds any more, or a new one.
  std::shared_ptr<std::string> Take();
  // `blob` holds `version`'s bytes from now on; the oldest versions beyond kKept become spares.
  void Keep(uint64_t version, std::shared_ptr<std::string> blob);
  // A blob that is not a version's (a failed commit's, or one warmed ahead): reused next.
  void AddSpare(std::shared_ptr<std::string> blob) { spare_.push_back(std::move(blob)); }
  // The bytes of `version`; null when it is not kept.
  std::shared_ptr<std::string> Find(uint64_t version) const;
  // The size of the newest version's bytes, when a warm spare is wanted (none yet, and a version
  // to size it by); 0 otherwise.
  size_t SpareWanted() const;

 private:
  std::map<uint64_t, std::shared_ptr<std::string>> kept_;
  std::vector<std::shared_ptr<std::string>> spare_;
};

// The committed model as safetensors (f32, the same bytes ModelToSafetensors writes) into
// `blob`, taken straight from the weights: models are large, every copy shows in the commit's
// latency. With `threads` (the commit's), each large tensor is copied on all of them.
Status WriteModelSafetensors(const model::ModelSpec& mspec, const std::string& job,
                             const std::vector<float>& weights, uint64_t version, std::string* blob,
                             aggregator::FoldPool* threads);

}  // namespace shoal::coordinator_internal
