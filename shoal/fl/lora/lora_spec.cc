#include "shoal/fl/lora/lora_spec.h"

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>

namespace shoal::lora {
namespace {

struct LinearShape {
  uint64_t in = 0;
  uint64_t out = 0;
};

LinearShape Shape(std::string_view target, uint64_t d) {
  if (target == "attn.qkv") return {d, 3 * d};
  if (target == "mlp.fc") return {d, 4 * d};
  if (target == "mlp.proj") return {4 * d, d};
  return {d, d};  // attn.proj
}

}  // namespace

Result<BaseConfig> ReadBaseConfig(const std::string& path) {
  // The header only (u64 length, then JSON): the coordinator reads it for every leaf spec.
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument("cannot read " + path);
  unsigned char len[8] = {};
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (!f || n == 0 || n > (uint64_t{100} << 20)) {
    return InvalidArgument(path + ": not a safetensors file (header length " + std::to_string(n) +
                           ")");
  }
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!f || !j.is_object()) return InvalidArgument(path + ": the safetensors header is not JSON");
  const nlohmann::json meta = j.value("__metadata__", nlohmann::json::object());
  auto text = [&](const char* key) -> std::string {
    return meta.is_object() && meta.contains(key) && meta[key].is_string()
               ? meta[key].get<std::string>()
               : std::string();
  };
  const std::string format = text("format");
  if (format != "shoal-gpt/1") {
    return InvalidArgument(path + ": not a shoal-gpt model (metadata format " +
                           (format.empty() ? std::string("missing") : "'" + format + "'") +
                           ", expected 'shoal-gpt/1')");
  }
  BaseConfig c;
  for (auto [key, out] : {std::pair<const char*, uint64_t*>{"d_model", &c.d_model},
                          std::pair<const char*, uint64_t*>{"n_layer", &c.n_layer}}) {
    const std::string v = text(key);
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || *out == 0) {
      return InvalidArgument(path + ": metadata " + key + " is not a positive integer");
    }
  }
  const nlohmann::json wte = j.value("wte", nlohmann::json());
  const nlohmann::json shape = wte.is_object() ? wte.value("shape", nlohmann::json()) : wte;
  if (!shape.is_array() || shape.size() != 2 || !shape[1].is_number_unsigned() ||
      shape[1].get<uint64_t>() != c.d_model) {
    return InvalidArgument(path + ": tensor wte missing or not [vocab, d_model]");
  }
  return c;
}

model::ModelSpec AdapterSpec(const BaseConfig& base, uint32_t rank,
                             std::span<const std::string> targets) {
  std::vector<model::TensorSpec> tensors;
  for (uint64_t i = 0; i < base.n_layer; ++i) {
    for (const std::string& t : targets) {
      const LinearShape s = Shape(t, base.d_model);
      const std::string name = "h." + std::to_string(i) + "." + t;
      tensors.push_back({name + ".lora_A", {rank, s.in}, s.in});
      tensors.push_back({name + ".lora_B", {s.out, rank}, 0});
    }
  }
  return model::ModelSpec(std::move(tensors));
}

Result<model::ModelSpec> AdapterSpec(const std::string& base, uint32_t rank,
                                     std::span<const std::string> targets) {
  auto c = ReadBaseConfig(base);
  if (!c.ok()) return InvalidArgument("spec.model.lora.base: " + c.status().message());
  return AdapterSpec(*c, rank, targets);
}

bool IsLoraA(std::string_view name) { return name.ends_with(".lora_A"); }
bool IsLoraB(std::string_view name) { return name.ends_with(".lora_B"); }

std::string JoinTargets(std::span<const std::string> targets) {
  std::string out;
  for (const std::string& t : targets) out += (out.empty() ? "" : ",") + t;
  return out;
}

std::vector<std::string> SplitTargets(std::string_view joined) {
  std::vector<std::string> out;
  while (!joined.empty()) {
    const size_t comma = joined.find(',');
    out.emplace_back(joined.substr(0, comma));
    joined = comma == std::string_view::npos ? std::string_view() : joined.substr(comma + 1);
  }
  return out;
}

}  // namespace shoal::lora
