// LoRA adapters of the shoal-gpt language model (docs/reference/lm-format.md) as an FL job's
// model: spec.model.lora {base, rank, alpha, targets} names the base model file and the linears
// adapted; the job's tensors are each adapted linear L's "L.lora_A" [r, in] and "L.lora_B"
// [out, r], in layer then target order, and its initial global is LoRA's (A uniform in
// ±1/sqrt(in) from the job's seed, B zero: version 0 is the base model).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/wire/model_spec.h"

namespace shoal::lora {

// The linears of a shoal-gpt layer an adapter may adapt ("attn.qkv", ...), in file order.
inline constexpr const char* kTargets[] = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"};
// spec.aggregation.lora.method: FedIT (FedAvg of A and B; every client at the job's rank) or
// HetLoRA (clients' ranks r_k <= the job's, zero-padded into it at the leaf).
inline constexpr const char* kMethods[] = {"fedit", "hetlora"};

// The sizes the base model's __metadata__ gives (format "shoal-gpt/1").
struct BaseConfig {
  uint64_t d_model = 0;
  uint64_t n_layer = 0;
};

// Reads the base model file's metadata; errors name the file and the field.
Result<BaseConfig> ReadBaseConfig(const std::string& path);

// The job's tensors for `base` at `rank` over `targets` (each one of kTargets). lora_A's
// fan_in is its input size (InitModel draws it uniform), lora_B's 0 (zero).
model::ModelSpec AdapterSpec(const BaseConfig& base, uint32_t rank,
                             std::span<const std::string> targets);

// ReadBaseConfig then AdapterSpec; errors prefixed with "spec.model.lora.base: ".
Result<model::ModelSpec> AdapterSpec(const std::string& base, uint32_t rank,
                                     std::span<const std::string> targets);

// Whether `name` is an adapter's A or B tensor ("...lora_A" / "...lora_B").
bool IsLoraA(std::string_view name);
bool IsLoraB(std::string_view name);

// Targets as one comma-separated value (the leaf's environment) and back.
std::string JoinTargets(std::span<const std::string> targets);
std::vector<std::string> SplitTargets(std::string_view joined);

}  // namespace shoal::lora
