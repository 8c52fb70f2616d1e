// Global models that simulated clients train from, downloaded once per version and shared by
// every client thread in the process: sixteen clients handed the same version cause one
// download. Keeps the newest few versions; a client asking for an evicted one downloads again.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "shoal/common/status.h"
#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/tools/flsim/mlp_trainer.h"

namespace shoal::client {

// A global model as the MLP trainer takes it: `model.values` is the contiguous float32 vector
// in PyTorch order (fc1.weight, fc1.bias, fc2.weight, fc2.bias).
struct MlpModel {
  uint64_t version = 0;
  MlpShape shape;
  model::Model model{model::ModelSpec{}};
};

// Reads a safetensors file holding an `mlp` with one hidden layer (fc1.weight [H,D], fc1.bias
// [H], fc2.weight [C,H], fc2.bias [C], any supported dtype) in any data order.
// kInvalidArgument naming what is missing or mismatched otherwise.
Result<MlpModel> MlpModelFromSafetensors(std::span<const std::byte> file, uint64_t version);

class ModelCache {
 public:
  using Fetch = std::function<Result<FlModelBytes>(uint64_t version)>;

  explicit ModelCache(size_t capacity = 4) : capacity_(capacity == 0 ? 1 : capacity) {}

  // The model of `version`: from the cache, or downloaded with `fetch` by this caller while
  // concurrent callers for the same version wait for that download. Thread-safe.
  Result<std::shared_ptr<const MlpModel>> Get(uint64_t version, const Fetch& fetch);

  // Downloads made (successful or not); the test of "one download per version".
  uint64_t downloads() const;

 private:
  struct Slot {
    bool loading = true;
    std::shared_ptr<const MlpModel> model;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Slot> slots_;
  uint64_t downloads_ = 0;
};

}  // namespace shoal::client
