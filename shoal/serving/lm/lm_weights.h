// The "shoal-gpt" decoder's weights (docs/reference/lm-format.md): a byte-level GPT-2 read from
// safetensors, every tensor checked against the sizes its __metadata__ states, and LoRA adapters
// ("shoal-lora/1") checked against the base they adapt.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::lm {

struct LmConfig {
  int vocab_size = 257;
  int d_model = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_ctx = 0;
  int eos = 256;
  int head_dim() const { return d_model / n_head; }
};

// The four adaptable linears of a layer, in the order of their tensors' names.
enum class Linear : int { kQkv = 0, kProj = 1, kFc = 2, kMlpProj = 3 };
inline constexpr int kLinears = 4;
// "attn.qkv", "attn.proj", "mlp.fc", "mlp.proj".
const char* LinearName(Linear l);
// Rows (out) and columns (in) of a layer's linear.
int LinearOut(const LmConfig& c, Linear l);
int LinearIn(const LmConfig& c, Linear l);

struct LayerWeights {
  const float* ln1_w;
  const float* ln1_b;
  const float* ln2_w;
  const float* ln2_b;
  std::array<const float*, kLinears> w;  // [out, in], row-major; null when int8
  std::array<const float*, kLinears> b;  // [out]
  // int8 weights (QuantizeInt8): w ~= q * scale per row (symmetric); null for fp32.
  std::array<const int8_t*, kLinears> q{};
  std::array<const float*, kLinears> scale{};
};

struct LmWeights {
  LmConfig config;
  const float* wte = nullptr;  // [V, d]
  const float* wpe = nullptr;  // [n_ctx, d]
  std::vector<LayerWeights> layers;
  const float* lnf_w = nullptr;
  const float* lnf_b = nullptr;
  std::vector<float> storage;     // every tensor, owned
  std::vector<int8_t> q_storage;  // int8: the linears' weights
  bool int8() const { return !q_storage.empty(); }
};

// The same model with every layer's linear weights as int8, one symmetric scale per output row
// (max |w| / 127), dequantized in the matmul; embeddings (and the head tied to wte), LayerNorms
// and biases stay fp32. The fp32 linears are not kept.
std::shared_ptr<const LmWeights> QuantizeInt8(const LmWeights& w);

// A base model from its safetensors bytes. kInvalidArgument naming the field or tensor when the
// metadata or a shape does not match the contract.
Result<std::shared_ptr<const LmWeights>> LoadLmWeights(std::span<const std::byte> file);
Result<std::shared_ptr<const LmWeights>> LoadLmWeightsFile(const std::string& path);

struct LoraPair {
  int rank = 0;
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank]
};

struct LoraAdapter {
  std::string name;
  uint64_t version = 0;  // the FL job's version it came from (0: a file)
  float scale = 0;       // alpha / rank
  // layers[i][linear]: empty (rank 0) where the adapter leaves the linear alone.
  std::vector<std::array<LoraPair, kLinears>> layers;
};

// An adapter for `base` from its safetensors bytes. Rank from the metadata or else from lora_A's
// first dimension; alpha from the metadata or else `default_alpha` (an FL job's commits may not
// carry the metadata): an error when neither gives it.
Result<std::shared_ptr<const LoraAdapter>> LoadLoraAdapter(std::span<const std::byte> file,
                                                           const LmConfig& base,
                                                           std::optional<float> default_alpha);

}  // namespace shoal::lm
