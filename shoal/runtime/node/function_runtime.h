// The live state of one deployed function (one generation of it), shared by the gateway loops
// (routing, stats) and the instance manager (instances). A re-deploy creates a new
// FunctionRuntime; the old one drains, like a Knative revision.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/buffer_pool.h"
#include "shoal/interfaces/function_spec.h"
#include "shoal/interfaces/request_sink.h"
#include "shoal/runtime/node/function_router.h"
#include "shoal/runtime/node/latency_window.h"
#include "shoal/runtime/node/node_metrics.h"

namespace shoal {

// Instance endpoint keys carry the instance's holder slot in their low bits, so the gateway
// can hand a buffer to the instance knowing only its key.
inline constexpr uint32_t kSlotBits = 6;
inline constexpr HolderSlot SlotOfInstance(uint32_t key) { return key & ((1u << kSlotBits) - 1); }
inline constexpr uint32_t InstanceKey(uint32_t sequence, HolderSlot slot) {
  return (sequence << kSlotBits) | slot;
}

struct FunctionRuntime {
  FunctionRuntime(FunctionSpec s, BufferPool* p, NodeMetrics& node_metrics, uint32_t max_queue)
      : spec(std::move(s)), pool(p), router(max_queue), metrics(node_metrics, spec.name) {}

  const FunctionSpec spec;
  BufferPool* const pool;  // the tenant's pool
  FunctionRouter router;
  FunctionMetrics metrics;
  LatencyWindow latency;
  std::atomic<uint64_t> requests_total{0};
  std::atomic<uint64_t> errors_total{0};
  std::atomic<uint64_t> cold_starts{0};
  std::atomic<uint64_t> last_cold_start_us{0};
  std::atomic<bool> retired{false};  // deleted or replaced: takes no new requests
};

// name -> current runtime. Gateway loops read it on every request (shared lock).
class FunctionTable {
 public:
  std::shared_ptr<FunctionRuntime> Find(std::string_view name) const {
    std::shared_lock lock(mu_);
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  // The function serving an Open Inference Protocol model name (/v2/models/{model}).
  std::shared_ptr<FunctionRuntime> FindModel(std::string_view model) const {
    std::shared_lock lock(mu_);
    auto it = by_model_.find(model);
    return it == by_model_.end() ? nullptr : it->second;
  }
  void Set(const std::string& name, std::shared_ptr<FunctionRuntime> fn) {
    std::unique_lock lock(mu_);
    EraseModelsOf(name);
    if (std::string model = InferenceModelName(fn->spec); !model.empty()) by_model_[model] = fn;
    by_name_[name] = std::move(fn);
  }
  void Erase(const std::string& name) {
    std::unique_lock lock(mu_);
    EraseModelsOf(name);
    by_name_.erase(name);
  }
  std::vector<std::shared_ptr<FunctionRuntime>> All() const {
    std::shared_lock lock(mu_);
    std::vector<std::shared_ptr<FunctionRuntime>> out;
    for (const auto& [name, fn] : by_name_) out.push_back(fn);
    return out;
  }

 private:
  void EraseModelsOf(const std::string& name) {
    std::erase_if(by_model_, [&](const auto& kv) { return kv.second->spec.name == name; });
  }

  mutable std::shared_mutex mu_;
  std::map<std::string, std::shared_ptr<FunctionRuntime>, std::less<>> by_name_;
  std::map<std::string, std::shared_ptr<FunctionRuntime>, std::less<>> by_model_;
};

}  // namespace shoal
