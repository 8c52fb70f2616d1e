#include "shoal/serving/lm/lm_weights.h"

#include <charconv>
#include <cstring>
#include <map>

#include "shoal/common/file_io.h"
#include "shoal/fl/wire/dtype.h"
#include "shoal/fl/wire/safetensors.h"

namespace shoal::lm {
namespace {

using model::SafetensorsTensor;
using model::SafetensorsView;

Result<int> MetaInt(const SafetensorsView& v, const std::string& key, int lo, int hi) {
  auto it = v.metadata.find(key);
  if (it == v.metadata.end()) return InvalidArgument("__metadata__." + key + " is missing");
  int n = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p != s.data() + s.size() || n < lo || n > hi) {
    return InvalidArgument("__metadata__." + key + " is '" + s + "', not an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return n;
}

std::string ShapeText(std::span<const uint64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The tensor's values appended to `out` (converted to float32); its shape must be `shape`.
Result<size_t> Take(const SafetensorsView& v, const std::string& name,
                    std::initializer_list<uint64_t> shape, std::vector<float>& out) {
  const SafetensorsTensor* t = v.Find(name);
  if (t == nullptr) return InvalidArgument("tensor '" + name + "' is missing");
  const std::vector<uint64_t> want(shape);
  if (t->shape != want) {
    return InvalidArgument("tensor '" + name + "' has shape " + ShapeText(t->shape) +
                           ", the metadata says " + ShapeText(want));
  }
  size_t n = 1;
  for (uint64_t d : want) n *= d;
  const size_t at = out.size();
  out.resize(at + n);
  model::DecodeFloats(t->data.data(), t->dtype, n, out.data() + at);
  return at;
}

}  // namespace

const char* LinearName(Linear l) {
  static constexpr const char* kNames[] = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"};
  return kNames[static_cast<int>(l)];
}

int LinearOut(const LmConfig& c, Linear l) {
  switch (l) {
    case Linear::kQkv:
      return 3 * c.d_model;
    case Linear::kFc:
      return 4 * c.d_model;
    default:
      return c.d_model;
  }
}

int LinearIn(const LmConfig& c, Linear l) {
  return l == Linear::kMlpProj ? 4 * c.d_model : c.d_model;
}

Result<std::shared_ptr<const LmWeights>> LoadLmWeights(std::span<const std::byte> file) {
  auto view = model::ReadSafetensors(file);
  if (!view.ok()) return view.status();
  const SafetensorsView& v = *view;
  auto format = v.metadata.find("format");
  if (format == v.metadata.end() || format->second != "shoal-gpt/1") {
    return InvalidArgument("__metadata__.format must be 'shoal-gpt/1', got '" +
                           (format == v.metadata.end() ? std::string() : format->second) + "'");
  }
  auto w = std::make_shared<LmWeights>();
  LmConfig& c = w->config;
  auto vocab = MetaInt(v, "vocab_size", 257, 257);
  auto d = MetaInt(v, "d_model", 1, 1 << 16);
  auto layers = MetaInt(v, "n_layer", 1, 1024);
  auto heads = MetaInt(v, "n_head", 1, 1024);
  auto ctx = MetaInt(v, "n_ctx", 1, 1 << 20);
  auto eos = MetaInt(v, "eos", 256, 256);
  for (const Result<int>* r : {&vocab, &d, &layers, &heads, &ctx, &eos}) {
    if (!r->ok()) return r->status();
  }
  c = {*vocab, *d, *layers, *heads, *ctx, *eos};
  if (c.d_model % c.n_head != 0) {
    return InvalidArgument("__metadata__.d_model " + std::to_string(c.d_model) +
                           " is not a multiple of n_head " + std::to_string(c.n_head));
  }
  const auto V = static_cast<uint64_t>(c.vocab_size);
  const auto D = static_cast<uint64_t>(c.d_model);
  // Offsets first (the storage grows), pointers once it is complete.
  std::vector<size_t> at;
  auto take = [&](const std::string& name, std::initializer_list<uint64_t> shape) -> Status {
    auto r = Take(v, name, shape, w->storage);
    if (!r.ok()) return r.status();
    at.push_back(*r);
    return {};
  };
  SHOAL_RETURN_IF_ERROR(take("wte", {V, D}));
  SHOAL_RETURN_IF_ERROR(take("wpe", {static_cast<uint64_t>(c.n_ctx), D}));
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    SHOAL_RETURN_IF_ERROR(take(p + "ln1.weight", {D}));
    SHOAL_RETURN_IF_ERROR(take(p + "ln1.bias", {D}));
    SHOAL_RETURN_IF_ERROR(take(p + "ln2.weight", {D}));
    SHOAL_RETURN_IF_ERROR(take(p + "ln2.bias", {D}));
    for (int l = 0; l < kLinears; ++l) {
      const auto lin = static_cast<Linear>(l);
      const auto out = static_cast<uint64_t>(LinearOut(c, lin));
      const auto in = static_cast<uint64_t>(LinearIn(c, lin));
      SHOAL_RETURN_IF_ERROR(take(p + LinearName(lin) + ".weight", {out, in}));
      SHOAL_RETURN_IF_ERROR(take(p + LinearName(lin) + ".bias", {out}));
    }
  }
  SHOAL_RETURN_IF_ERROR(take("ln_f.weight", {D}));
  SHOAL_RETURN_IF_ERROR(take("ln_f.bias", {D}));
  const size_t expected = 4 + static_cast<size_t>(c.n_layer) * 12 + 2;
  if (v.tensors.size() != expected) {
    for (const SafetensorsTensor& t : v.tensors) {
      bool known = t.name == "wte" || t.name == "wpe" || t.name.starts_with("ln_f.");
      if (t.name.starts_with("h.")) {
        const size_t dot = t.name.find('.', 2);
        int layer = -1;
        std::from_chars(t.name.data() + 2, t.name.data() + dot, layer);
        known = layer >= 0 && layer < c.n_layer;
      }
      if (!known) return InvalidArgument("tensor '" + t.name + "' is not part of shoal-gpt/1");
    }
  }
  const float* s = w->storage.data();
  size_t k = 0;
  w->wte = s + at[k++];
  w->wpe = s + at[k++];
  w->layers.resize(static_cast<size_t>(c.n_layer));
  for (LayerWeights& L : w->layers) {
    L.ln1_w = s + at[k++];
    L.ln1_b = s + at[k++];
    L.ln2_w = s + at[k++];
    L.ln2_b = s + at[k++];
    for (int l = 0; l < kLinears; ++l) {
      L.w[l] = s + at[k++];
      L.b[l] = s + at[k++];
    }
  }
  w->lnf_w = s + at[k++];
  w->lnf_b = s + at[k++];
  return std::shared_ptr<const LmWeights>(std::move(w));
}

Result<std::shared_ptr<const LmWeights>> LoadLmWeightsFile(const std::string& path) {
  auto bytes = ReadFileBytes(path);
  if (!bytes) return InvalidArgument("cannot read the base model '" + path + "'");
  auto w = LoadLmWeights(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()));
  if (!w.ok()) return InvalidArgument(path + ": " + w.status().message());
  return w;
}

Result<std::shared_ptr<const LoraAdapter>> LoadLoraAdapter(std::span<const std::byte> file,
                                                           const LmConfig& base,
                                                           std::optional<float> default_alpha) {
  auto view = model::ReadSafetensors(file);
  if (!view.ok()) return view.status();
  const SafetensorsView& v = *view;
  auto format = v.metadata.find("format");
  if (format != v.metadata.end() && format->second != "shoal-lora/1" && format->second != "pt") {
    return InvalidArgument("__metadata__.format must be 'shoal-lora/1', got '" + format->second +
                           "'");
  }
  std::optional<int> meta_rank;
  if (v.metadata.count("rank")) {
    auto r = MetaInt(v, "rank", 1, 1 << 16);
    if (!r.ok()) return r.status();
    meta_rank = *r;
  }
  std::optional<float> alpha = default_alpha;
  if (auto it = v.metadata.find("alpha"); it != v.metadata.end()) {
    char* end = nullptr;
    const float a = std::strtof(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0') {
      return InvalidArgument("__metadata__.alpha is '" + it->second + "', not a number");
    }
    alpha = a;
  }
  auto ad = std::make_shared<LoraAdapter>();
  ad->layers.resize(static_cast<size_t>(base.n_layer));
  int rank = 0;
  size_t used = 0;
  for (int i = 0; i < base.n_layer; ++i) {
    for (int l = 0; l < kLinears; ++l) {
      const auto lin = static_cast<Linear>(l);
      const std::string p = "h." + std::to_string(i) + "." + LinearName(lin);
      const SafetensorsTensor* a = v.Find(p + ".lora_A");
      const SafetensorsTensor* b = v.Find(p + ".lora_B");
      if (a == nullptr && b == nullptr) continue;
      if (a == nullptr || b == nullptr) {
        return InvalidArgument("tensor '" + p + (a ? ".lora_B" : ".lora_A") +
                               "' is missing (its pair is there)");
      }
      if (a->shape.size() != 2 || a->shape[0] == 0) {
        return InvalidArgument("tensor '" + p + ".lora_A' has shape " + ShapeText(a->shape) +
                               ", want [r, " + std::to_string(LinearIn(base, lin)) + "]");
      }
      const int r = meta_rank ? *meta_rank : static_cast<int>(a->shape[0]);
      if (rank != 0 && r != rank) {
        return InvalidArgument("tensor '" + p + ".lora_A' has rank " + std::to_string(r) +
                               ", others " + std::to_string(rank));
      }
      rank = r;
      LoraPair& pair = ad->layers[static_cast<size_t>(i)][static_cast<size_t>(l)];
      pair.rank = r;
      auto ta =
          Take(v, p + ".lora_A",
               {static_cast<uint64_t>(r), static_cast<uint64_t>(LinearIn(base, lin))}, pair.a);
      if (!ta.ok()) return ta.status();
      auto tb =
          Take(v, p + ".lora_B",
               {static_cast<uint64_t>(LinearOut(base, lin)), static_cast<uint64_t>(r)}, pair.b);
      if (!tb.ok()) return tb.status();
      used += 2;
    }
  }
  if (used == 0) return InvalidArgument("no lora_A/lora_B tensor for any layer of the base model");
  if (used != v.tensors.size()) {
    for (const SafetensorsTensor& t : v.tensors) {
      if (!t.name.ends_with(".lora_A") && !t.name.ends_with(".lora_B")) {
        return InvalidArgument("tensor '" + t.name + "' is not a LoRA tensor");
      }
    }
    return InvalidArgument("an adapter tensor names a layer the base model (" +
                           std::to_string(base.n_layer) + " layers) does not have");
  }
  if (!alpha) {
    return InvalidArgument(
        "__metadata__.alpha is missing and no default alpha was given (the FL job's "
        "spec.model.lora.alpha or the function's adapter alpha)");
  }
  ad->scale = *alpha / static_cast<float>(rank);
  return std::shared_ptr<const LoraAdapter>(std::move(ad));
}

}  // namespace shoal::lm
