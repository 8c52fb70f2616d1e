// The global model as the aggregation algorithms see it: one flat float32 vector (tensor
// boundaries are the caller's business), its version, and the server optimizer's state. The
// whole struct is what a checkpoint holds, so a restarted coordinator resumes FedAvgM/FedAdam
// with the same momentum.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::aggregator {

struct ModelState {
  uint64_t version = 0;
  std::vector<float> weights;
  // Server optimizer state, empty until an algorithm that needs it first commits:
  // FedAvgM keeps its momentum v in `momentum`; FedAdam keeps m in `momentum`, v in
  // `second_moment`.
  std::vector<float> momentum;
  std::vector<float> second_moment;

  // Checkpoint bytes: "SHMS", format u32, version u64, three lengths u64, then the three float
  // arrays; little-endian, floats bit-exact (Serialize(Deserialize(b)) == b).
  std::vector<uint8_t> Serialize() const;
  static Result<ModelState> Deserialize(std::span<const uint8_t> bytes);

  bool operator==(const ModelState&) const = default;
};

}  // namespace shoal::aggregator
