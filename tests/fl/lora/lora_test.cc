// shoal/fl/lora: a LoRA job's tensors from a shoal-gpt base file, the update parser's lower-rank
// LoRA tensors (HetLoRA) and its refusals, and the zero-padding fold against a hand-computed
// weighted mean.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shoal/fl/lora/lora_fold.h"
#include "shoal/fl/lora/lora_spec.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::lora {
namespace {

constexpr uint64_t kD = 8;  // d_model
const std::vector<std::string> kQkvFc = {"attn.qkv", "mlp.fc"};

// A shoal-gpt file with only what ReadBaseConfig reads (the metadata and wte).
std::string WriteBase(const std::string& name, const std::string& format = "shoal-gpt/1") {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::vector<float> wte(257 * kD, 0.5f);
  const std::vector<uint64_t> shape = {257, kD};
  model::SafetensorsEntry e{"wte", DType::kF32, shape, std::as_bytes(std::span<const float>(wte))};
  auto bytes = model::WriteSafetensors(std::span(&e, 1), {{"format", format},
                                                          {"d_model", std::to_string(kD)},
                                                          {"n_layer", "2"},
                                                          {"n_head", "2"},
                                                          {"n_ctx", "16"},
                                                          {"vocab_size", "257"},
                                                          {"eos", "256"}});
  EXPECT_TRUE(bytes.ok());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes->data()),
             static_cast<std::streamsize>(bytes->size()));
  return path;
}

// Every tensor of `spec` filled with (seed + i) / 8 patterns: small dyadic values, so weighted
// sums with weights 1 and 3 and the division by 4 are exact.
model::Model Dyadic(const model::ModelSpec& spec, int seed) {
  model::Model m(spec);
  for (size_t i = 0; i < m.values.size(); ++i) {
    m.values[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 33) - 16) / 8.0f;
  }
  return m;
}

std::string Body(const model::Model& m, uint64_t samples = 1) {
  const model::UpdateMeta meta{"j", "c1", "t", 0, samples, 0, 0.0, model::UpdateKind::kWeights};
  auto body = model::EncodeUpdate(meta, m, DType::kF32);
  EXPECT_TRUE(body.ok()) << body.status().ToString();
  return std::string(reinterpret_cast<const char*>(body->data()), body->size());
}

Result<model::UpdateView> Parse(const std::string& body, const model::ModelSpec& spec,
                                bool lower_rank) {
  model::ParseLimits l;
  l.lora_lower_rank = lower_rank;
  return model::ParseUpdate(std::as_bytes(std::span(body.data(), body.size())), spec, l);
}

TEST(LoraSpec, AdapterTensorsFromTheBaseFile) {
  const std::string base = WriteBase("shoal-lora-spec-base.safetensors");
  auto spec = AdapterSpec(base, 4, kQkvFc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->size(), 8u);  // 2 layers x 2 targets x (A, B)
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> want = {
      {"h.0.attn.qkv.lora_A", {4, 8}}, {"h.0.attn.qkv.lora_B", {24, 4}},
      {"h.0.mlp.fc.lora_A", {4, 8}},   {"h.0.mlp.fc.lora_B", {32, 4}},
      {"h.1.attn.qkv.lora_A", {4, 8}}, {"h.1.attn.qkv.lora_B", {24, 4}},
      {"h.1.mlp.fc.lora_A", {4, 8}},   {"h.1.mlp.fc.lora_B", {32, 4}}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(spec->tensor(i).name, want[i].first);
    EXPECT_EQ(spec->tensor(i).shape, want[i].second);
    EXPECT_EQ(spec->tensor(i).fan_in, IsLoraA(want[i].first) ? 8u : 0u);  // B starts at zero
  }
  auto proj = AdapterSpec(ReadBaseConfig(base).value(), 2, std::vector<std::string>{"mlp.proj"});
  EXPECT_EQ(proj.tensor(0).shape, (std::vector<uint64_t>{2, 32}));
  EXPECT_EQ(proj.tensor(1).shape, (std::vector<uint64_t>{8, 2}));
  const std::string other = WriteBase("shoal-lora-spec-other.safetensors", "pt");
  auto bad = AdapterSpec(other, 4, kQkvFc);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "spec.model.lora.base: " + other +
                                        ": not a shoal-gpt model (metadata format 'pt', "
                                        "expected 'shoal-gpt/1')");
  std::filesystem::remove(base);
  std::filesystem::remove(other);
}

TEST(LoraParse, LowerRankOnlyWhereTheJobTakesIt) {
  const model::ModelSpec job = AdapterSpec(BaseConfig{kD, 2}, 4, kQkvFc);
  const std::string low = Body(Dyadic(AdapterSpec(BaseConfig{kD, 2}, 2, kQkvFc), 1));
  auto fedit = Parse(low, job, false);
  ASSERT_FALSE(fedit.ok());
  EXPECT_EQ(fedit.status().message(),
            "tensor 'h.0.attn.qkv.lora_A': shape [4,8] expected, got [2,8]");
  auto het = Parse(low, job, true);
  ASSERT_TRUE(het.ok()) << het.status().ToString();
  EXPECT_EQ(het->tensors[0].lora_rank, 2u);
  EXPECT_EQ(het->tensors[0].numel, 16u);  // [2, 8]
  EXPECT_EQ(het->tensors[1].numel, 48u);  // [24, 2]
  auto full = Parse(Body(Dyadic(job, 2)), job, true);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->tensors[3].lora_rank, 4u);
}

TEST(LoraParse, RefusalsNameTheTensor) {
  const model::ModelSpec job = AdapterSpec(BaseConfig{kD, 2}, 4, kQkvFc);
  auto high = Parse(Body(Dyadic(AdapterSpec(BaseConfig{kD, 2}, 8, kQkvFc), 1)), job, true);
  ASSERT_FALSE(high.ok());
  EXPECT_EQ(high.status().message(),
            "tensor 'h.0.attn.qkv.lora_A': rank 8 exceeds the job's rank 4 (spec.model.lora.rank), "
            "shape [8,8]");
  // lora_B of mlp.fc with 24 rows instead of 32 (the inner size is the base's, not the rank).
  std::vector<model::TensorSpec> t = AdapterSpec(BaseConfig{kD, 2}, 2, kQkvFc).tensors();
  t[3].shape = {24, 2};
  auto inner = Parse(Body(Dyadic(model::ModelSpec(t), 1)), job, true);
  ASSERT_FALSE(inner.ok());
  EXPECT_EQ(inner.status().message(),
            "tensor 'h.0.mlp.fc.lora_B': shape [32,r] expected with 1 <= r <= 4, got [24,2]");
  t = AdapterSpec(BaseConfig{kD, 2}, 2, kQkvFc).tensors();
  t[4].shape = {3, 8};
  auto mixed = Parse(Body(Dyadic(model::ModelSpec(t), 1)), job, true);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().message(),
            "tensor 'h.1.attn.qkv.lora_A': rank 3, but tensor 'h.0.attn.qkv.lora_A' has rank 2 "
            "(one rank per "
            "update)");
}

// HetLoRA's aggregate: Σ n_k pad(x_k) / Σ n_k, pad the zero-padding to the job's rank.
TEST(LoraFold, LowerRanksFoldZeroPadded) {
  const model::ModelSpec job = AdapterSpec(BaseConfig{kD, 2}, 4, kQkvFc);
  const model::ModelSpec r2 = AdapterSpec(BaseConfig{kD, 2}, 2, kQkvFc);
  const model::Model x1 = Dyadic(job, 1);
  const model::Model x2 = Dyadic(r2, 2);
  const std::string b1 = Body(x1), b2 = Body(x2, 3);
  std::vector<float> acc(job.num_params(), 0.0f);
  FoldUpdate(acc.data(), job, Parse(b1, job, true).value(), 1.0f);
  FoldUpdate(acc.data(), job, Parse(b2, job, true).value(), 3.0f);
  for (float& v : acc) v /= 4.0f;
  for (size_t i = 0; i < job.size(); ++i) {
    const auto& s = job.tensor(i).shape;
    const bool a = IsLoraA(job.tensor(i).name);
    std::span<const float> low = x2.tensor(i);
    for (uint64_t r = 0; r < s[0]; ++r) {
      for (uint64_t c = 0; c < s[1]; ++c) {
        // x2's element at [r, c] of the rank-4 tensor, zero where it has no such element.
        const bool in = a ? r < 2 : c < 2;
        const float padded = in ? low[a ? r * s[1] + c : r * 2 + c] : 0.0f;
        const float want = (x1.tensor(i)[r * s[1] + c] + 3.0f * padded) / 4.0f;
        ASSERT_EQ(acc[job.offset(i) + r * s[1] + c], want)
            << job.tensor(i).name << " [" << r << "," << c << "]";
      }
    }
  }
}

TEST(LoraFold, FoldBlockAddsIntoTheFirstColumns) {
  std::vector<float> acc(3 * 4, 1.0f);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [3, 2]
  FoldBlock(acc.data(), 4, x.data(), DType::kF32, 3, 2, 0.5f);
  EXPECT_EQ(acc, (std::vector<float>{1.5, 2, 1, 1, 2.5, 3, 1, 1, 3.5, 4, 1, 1}));
}

}  // namespace
}  // namespace shoal::lora
