// DocumentParser: an FLJob's LoRA fields: spec.model.lora {base, rank, alpha, targets} (the job's
// model is an adapter of a shoal-gpt base model, shoal/fl/lora) and spec.aggregation.lora
// {method}. The base file's contents are checked by the coordinator at deploy.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "shoal/control/node/manifest_parser.h"
#include "shoal/fl/lora/lora_spec.h"

namespace shoal::manifest_internal {

void DocumentParser::ParseLora(const YAML::Node& n, FlLoraSpec& out) {
  const std::string path = "spec.model.lora";
  ExpectMap(n, path);
  CheckKeys(n, path, {"base", "rank", "alpha", "targets"});
  const YAML::Node base = Required(n, "base", path);
  out.base = String(base, path + ".base");
  if (out.base.empty() || out.base[0] != '/') {
    Fail(path + ".base", "must be an absolute path, got " + Quote(out.base), base);
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(out.base, ec)) {
    Fail(path + ".base", "no such file on this node: " + out.base, base);
  }
  if (const YAML::Node r = n["rank"]) {
    out.rank = static_cast<uint32_t>(Integer(r, path + ".rank", 1, 4096));
  }
  if (const YAML::Node a = n["alpha"]) {
    out.alpha = Number(a, path + ".alpha");
    if (!(out.alpha > 0) || !std::isfinite(out.alpha)) {
      Fail(path + ".alpha", "must be a finite number > 0, got " + a.Scalar(), a);
    }
  }
  if (const YAML::Node t = n["targets"]) {
    out.targets.clear();
    if (!t.IsSequence() || t.size() == 0) {
      Fail(path + ".targets", "must be a non-empty list of attn.qkv, attn.proj, mlp.fc, mlp.proj",
           t);
    }
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string item = path + ".targets[" + std::to_string(i) + "]";
      std::string name = OneOf(t[i], item, "target", lora::kTargets);
      if (std::find(out.targets.begin(), out.targets.end(), name) != out.targets.end()) {
        Fail(item, "duplicate target", t[i]);
      }
      out.targets.push_back(std::move(name));
    }
    // The file's order (lm-format.md), whatever the manifest's: the job's tensors follow it.
    std::vector<std::string> ordered;
    for (const char* k : lora::kTargets) {
      if (std::find(out.targets.begin(), out.targets.end(), k) != out.targets.end()) {
        ordered.emplace_back(k);
      }
    }
    out.targets = std::move(ordered);
  }
}

void DocumentParser::ParseLoraAggregation(const YAML::Node& n, FlLoraSpec& out) const {
  const std::string path = "spec.aggregation.lora";
  ExpectMap(n, path);
  CheckKeys(n, path, {"method"});
  if (const YAML::Node m = n["method"])
    out.method = OneOf(m, path + ".method", "method", lora::kMethods);
}

// What spec.model.lora cannot be combined with, and spec.aggregation.lora without it.
void DocumentParser::CheckLora(const FlJobSpec& spec, const YAML::Node& s) const {
  const YAML::Node model = s["model"];
  const YAML::Node agg = s["aggregation"];
  if (!spec.lora.enabled()) {
    if (agg && agg["lora"]) {
      Fail("spec.aggregation.lora", "needs spec.model.lora (the job's model is not an adapter)",
           agg["lora"]);
    }
    return;
  }
  for (const char* other : {"architecture", "onnx", "initial", "hidden"}) {
    if (model[other]) {
      Fail("spec.model.lora", std::string("give either spec.model.lora or spec.model.") + other,
           model["lora"]);
    }
  }
  if (spec.lora.method != "hetlora") return;
  const auto& wf = spec.wire_formats;
  const char* other = spec.robust.enabled()                     ? "spec.aggregation.robust"
                      : spec.privacy.dp.enabled                 ? "spec.privacy.dp"
                      : spec.privacy.secure_aggregation.enabled ? "spec.privacy.secureAggregation"
                      : std::find(wf.begin(), wf.end(), "int8") != wf.end() ||
                              std::find(wf.begin(), wf.end(), "int4") != wf.end()
                          ? "int8 or int4 in spec.aggregation.wireFormats"
                          : nullptr;
  if (other != nullptr) {
    Fail("spec.aggregation.lora.method",
         std::string("hetlora cannot be combined with ") + other +
             " (lower-rank adapters are zero-padded by the leaves' fold of f32, bf16 or f16 "
             "updates)",
         agg["lora"]);
  }
}

}  // namespace shoal::manifest_internal
