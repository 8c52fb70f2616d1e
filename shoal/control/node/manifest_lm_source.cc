// spec.inference.source.lm: a shoal-gpt language model served with OpenAI-compatible routes
// (shoal/serving/handler/lm_handler.cc):
//   lm:
//     base: /models/shoal-gpt.safetensors     # the base model on the node
//     adapters:                                # LoRA adapters, chosen per request
//       - {name: legal, path: /models/legal.safetensors}
//       - {name: live, flJob: lora-job, alpha: 16}   # each committed version, hot-swapped
// `alpha` is used when the adapter file's metadata has none (an FL job's commits may not carry
// it); without either, the FL job's status document's lora.alpha. Adapters follow at most one FL
// job (SHOAL_INFER_FL_JOB names it, for the instance's token of that job).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "shoal/control/node/manifest_parser.h"
#include "shoal/interfaces/function_spec.h"

namespace shoal::manifest_internal {
namespace {

// The lm handler's settings (shoal/serving/handler/lm_handler.cc reads them): the base model's
// file and the adapters as JSON [{"name", "path" | "flJob", "alpha"}].
constexpr const char* kInferLmBaseEnv = "SHOAL_INFER_LM_BASE";
constexpr const char* kInferLmAdaptersEnv = "SHOAL_INFER_LM_ADAPTERS";

}  // namespace

void DocumentParser::ParseLmSource(const YAML::Node& n, HandlerSpec* out) {
  ExpectMap(n, "spec.inference.source.lm");
  CheckKeys(n, "spec.inference.source.lm", {"base", "adapters"});
  const YAML::Node base = Required(n, "base", "spec.inference.source.lm");
  const std::string path = String(base, "spec.inference.source.lm.base");
  auto check_file = [&](const std::string& p, const std::string& where, const YAML::Node& at) {
    if (p.empty() || p[0] != '/') Fail(where, "must be an absolute path, got " + Quote(p), at);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec))
      Fail(where, "no such file on this node: " + p, at);
  };
  check_file(path, "spec.inference.source.lm.base", base);
  out->env[kInferLmBaseEnv] = path;
  nlohmann::json adapters = nlohmann::json::array();
  std::set<std::string> names;
  if (const YAML::Node list = n["adapters"]) {
    if (!list.IsSequence()) Fail("spec.inference.source.lm.adapters", "must be a list", list);
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node a = list[i];
      const std::string at = "spec.inference.source.lm.adapters[" + std::to_string(i) + "]";
      ExpectMap(a, at);
      CheckKeys(a, at, {"name", "path", "flJob", "alpha"});
      const YAML::Node name_node = Required(a, "name", at);
      const std::string name = String(name_node, at + ".name");
      CheckDnsLabel(name, at + ".name", name_node);
      if (!names.insert(name).second) Fail(at + ".name", "repeats " + Quote(name), name_node);
      nlohmann::json entry = {{"name", name}};
      const YAML::Node file = a["path"];
      const YAML::Node job = a["flJob"];
      if (static_cast<bool>(file) == static_cast<bool>(job)) {
        Fail(at, "set exactly one of path or flJob", a);
      }
      if (file) {
        const std::string p = String(file, at + ".path");
        check_file(p, at + ".path", file);
        entry["path"] = p;
      } else {
        const std::string j = String(job, at + ".flJob");
        CheckDnsLabel(j, at + ".flJob", job);
        // The instance reads the job's versions with an fl-client token of that one job
        // (shoald gives it for SHOAL_INFER_FL_JOB): one followed job per function.
        if (auto it = out->env.find(kInferFlJobEnv); it != out->env.end() && it->second != j) {
          Fail(at + ".flJob",
               "adapters of one function follow one FL job (" + Quote(it->second) + " already)",
               job);
        }
        out->env[kInferFlJobEnv] = j;
        entry["flJob"] = j;
      }
      if (const YAML::Node alpha = a["alpha"]) {
        const double v = Number(alpha, at + ".alpha");
        if (!(v > 0)) Fail(at + ".alpha", "must be positive", alpha);
        entry["alpha"] = v;
      }
      adapters.push_back(std::move(entry));
    }
  }
  out->env[kInferLmAdaptersEnv] = adapters.dump();
}

}  // namespace shoal::manifest_internal
