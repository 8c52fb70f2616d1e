#include "shoal/fl/coordinator/model_blobs.h"

#include <cstring>
#include <span>

#include "shoal/fl/wire/safetensors.h"

namespace shoal::coordinator_internal {

std::shared_ptr<std::string> ModelBlobs::Take() {
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->use_count() == 1) {  // no download and no checkpoint holds it any more
      std::shared_ptr<std::string> blob = std::move(*it);
      spare_.erase(it);
      return blob;
    }
  }
  return std::make_shared<std::string>();
}

void ModelBlobs::Keep(uint64_t version, std::shared_ptr<std::string> blob) {
  kept_[version] = std::move(blob);
  while (kept_.size() > kKept) {
    spare_.push_back(std::move(kept_.begin()->second));
    kept_.erase(kept_.begin());
  }
  while (spare_.size() > kSpare) spare_.erase(spare_.begin());
}

std::shared_ptr<std::string> ModelBlobs::Find(uint64_t version) const {
  auto it = kept_.find(version);
  return it == kept_.end() ? nullptr : it->second;
}

size_t ModelBlobs::SpareWanted() const {
  if (!spare_.empty() || kept_.empty()) return 0;
  return kept_.rbegin()->second->size();
}

Status WriteModelSafetensors(const model::ModelSpec& mspec, const std::string& job,
                             const std::vector<float>& weights, uint64_t version, std::string* blob,
                             aggregator::FoldPool* threads) {
  std::vector<model::SafetensorsEntry> entries;
  for (size_t i = 0; i < mspec.size(); ++i) {
    const model::TensorSpec& t = mspec.tensor(i);
    entries.push_back(
        {t.name, model::DType::kF32, t.shape,
         std::as_bytes(std::span<const float>(weights.data() + mspec.offset(i), t.numel()))});
  }
  auto at = model::WriteSafetensorsHeaderInto(
      entries,
      {{std::string(model::kMetadataJob), job},
       {std::string(model::kMetadataVersion), std::to_string(version)},
       {"format", "pt"}},
      blob);
  if (!at.ok()) return at.status();
  char* data = blob->data() + *at;
  for (size_t i = 0; i < mspec.size(); ++i) {
    const float* w = weights.data() + mspec.offset(i);
    const size_t n = mspec.tensor(i).numel();
    if (threads != nullptr) {
      threads->ConvertFromF32(data, w, model::DType::kF32, n);  // f32 to f32: a copy
    } else if (n > 0) {
      std::memcpy(data, w, n * sizeof(float));
    }
    data += n * sizeof(float);
  }
  return {};
}

}  // namespace shoal::coordinator_internal
