#include "shoal/fl/client/model_cache.h"

#include <string>
#include <utility>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"

namespace shoal::client {

Result<MlpModel> MlpModelFromSafetensors(std::span<const std::byte> file, uint64_t version) {
  auto view = model::ReadSafetensors(file);
  if (!view.ok()) return view.status();
  const model::SafetensorsTensor* fc1 = view->Find("fc1.weight");
  const model::SafetensorsTensor* fc2 = view->Find("fc2.weight");
  if (fc1 == nullptr || fc2 == nullptr || fc1->shape.size() != 2 || fc2->shape.size() != 2) {
    return InvalidArgument(
        "model version " + std::to_string(version) +
        ": not an mlp with one hidden layer (needs fc1.weight [H,D] and fc2.weight [C,H]); "
        "shoal-client trains only that architecture");
  }
  const uint64_t hidden = fc1->shape[0], inputs = fc1->shape[1], classes = fc2->shape[0];
  if (view->tensors.size() != 4) {
    return InvalidArgument("model version " + std::to_string(version) + ": expected 4 tensors " +
                           "(fc1.weight, fc1.bias, fc2.weight, fc2.bias), got " +
                           std::to_string(view->tensors.size()));
  }
  auto m = model::ModelFromSafetensors(file, model::MlpSpec(inputs, {hidden}, classes));
  if (!m.ok()) return m.status();
  MlpModel out;
  out.version = version;
  out.shape =
      MlpShape{static_cast<int>(inputs), static_cast<int>(hidden), static_cast<int>(classes)};
  out.model = std::move(m).value();
  return out;
}

Result<std::shared_ptr<const MlpModel>> ModelCache::Get(uint64_t version, const Fetch& fetch) {
  std::unique_lock lock(mu_);
  for (;;) {
    auto it = slots_.find(version);
    if (it == slots_.end()) break;
    if (!it->second.loading) return it->second.model;
    cv_.wait(lock);  // another caller is downloading it; look again when it is done
  }
  slots_.emplace(version, Slot{});
  ++downloads_;
  lock.unlock();

  Result<std::shared_ptr<const MlpModel>> result = Internal("unset");
  auto bytes = fetch(version);
  if (!bytes.ok()) {
    result = bytes.status();
  } else {
    auto parsed = MlpModelFromSafetensors(
        std::as_bytes(std::span<const char>(bytes->bytes.data(), bytes->bytes.size())), version);
    if (!parsed.ok()) {
      result = parsed.status();
    } else {
      result = std::shared_ptr<const MlpModel>(std::make_shared<MlpModel>(std::move(*parsed)));
    }
  }

  lock.lock();
  if (result.ok()) {
    slots_[version] = Slot{false, *result};
    // Evict the oldest finished versions beyond capacity (holders keep their shared_ptr).
    size_t finished = 0;
    for (const auto& [v, s] : slots_) finished += s.loading ? 0 : 1;
    for (auto e = slots_.begin(); finished > capacity_ && e != slots_.end();) {
      if (!e->second.loading && e->first != version) {
        e = slots_.erase(e);
        --finished;
      } else {
        ++e;
      }
    }
  } else {
    slots_.erase(version);  // a waiter retries the download itself
  }
  cv_.notify_all();
  return result;
}

uint64_t ModelCache::downloads() const {
  std::lock_guard lock(mu_);
  return downloads_;
}

}  // namespace shoal::client
