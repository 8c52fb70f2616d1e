// DocumentParser: an FLJob document's metadata and spec (algorithm, model, clients, rounds,
// aggregation and its robust rule).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <system_error>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/control/node/manifest_parser.h"
#include "shoal/runtime/sandbox/handler_library.h"
#include "shoal/runtime/sandbox/seccomp_policy.h"

namespace shoal::manifest_internal {

FlJobSpec DocumentParser::ParseFlJob(const YAML::Node& doc) {
  FlJobSpec spec;
  ParseMetadata(doc, {"name", "namespace"}, &spec.name, &spec.tenant);

  const YAML::Node s = Required(doc, "spec", "");
  ExpectMap(s, "spec");
  CheckKeys(s, "spec",
            {"algorithm", "model", "data", "clients", "stop", "deadlines", "training",
             "aggregation", "privacy", "flower", "durability"});
  if (const YAML::Node a = s["algorithm"]) {
    ExpectMap(a, "spec.algorithm");
    CheckKeys(a, "spec.algorithm", {"name", "params"});
    const YAML::Node n = Required(a, "name", "spec.algorithm");
    spec.algorithm = OneOf(n, "spec.algorithm.name", "algorithm", kFlAlgorithms);
    if (const YAML::Node params = a["params"]; params && !params.IsNull()) {
      ExpectMap(params, "spec.algorithm.params");
      for (auto it = params.begin(); it != params.end(); ++it) {
        if (!it->first.IsScalar() || it->first.Scalar().empty()) {
          Fail("spec.algorithm.params", "keys must be non-empty strings", it->first);
        }
        const std::string& k = it->first.Scalar();
        const std::string path = "spec.algorithm.params." + k;
        if (spec.algorithm_params.count(k)) Fail(path, "duplicate field", it->first);
        spec.algorithm_params[k] = Number(it->second, path);
      }
    }
  }
  if (const YAML::Node m = s["model"]) {
    ExpectMap(m, "spec.model");
    CheckKeys(m, "spec.model", {"architecture", "hidden", "initial", "seed", "onnx", "lora"});
    if (const YAML::Node a = m["architecture"]) {
      spec.architecture = OneOf(a, "spec.model.architecture", "architecture", kFlArchitectures);
    }
    if (const YAML::Node h = m["hidden"]) {
      spec.hidden = static_cast<uint32_t>(Integer(h, "spec.model.hidden", 1, 65536));
    }
    if (const YAML::Node init = m["initial"]) {
      spec.initial_model = String(init, "spec.model.initial");
      if (spec.initial_model.empty() || spec.initial_model[0] != '/') {
        Fail("spec.model.initial", "must be an absolute path, got " + Quote(spec.initial_model),
             init);
      }
      std::error_code ec;
      if (!std::filesystem::is_regular_file(spec.initial_model, ec)) {
        Fail("spec.model.initial", "no such file on this node: " + spec.initial_model, init);
      }
    }
    if (const YAML::Node onnx = m["onnx"]) {
      spec.onnx_model = String(onnx, "spec.model.onnx");
      if (spec.onnx_model.empty() || spec.onnx_model[0] != '/') {
        Fail("spec.model.onnx", "must be an absolute path, got " + Quote(spec.onnx_model), onnx);
      }
      std::error_code ec;
      if (!std::filesystem::is_regular_file(spec.onnx_model, ec)) {
        Fail("spec.model.onnx", "no such file on this node: " + spec.onnx_model, onnx);
      }
      if (m["architecture"]) {
        Fail("spec.model.onnx", "give either spec.model.architecture or spec.model.onnx", onnx);
      }
      spec.architecture = "onnx";
    }
    if (const YAML::Node lora = m["lora"]) {
      ParseLora(lora, spec.lora);
      spec.architecture = "lora";
    }
    if (const YAML::Node seed = m["seed"]) {
      spec.seed = static_cast<uint64_t>(
          Integer(seed, "spec.model.seed", 0, std::numeric_limits<int64_t>::max()));
    }
  }
  if (const YAML::Node d = s["data"]) {
    ExpectMap(d, "spec.data");
    CheckKeys(d, "spec.data", {"dataset"});
    if (const YAML::Node ds = d["dataset"]) {
      spec.dataset = String(ds, "spec.data.dataset");
      if (spec.dataset.empty()) Fail("spec.data.dataset", "must not be empty", ds);
    }
  }
  const YAML::Node c = Required(s, "clients", "spec");
  ExpectMap(c, "spec.clients");
  CheckKeys(c, "spec.clients", {"expected", "quorum", "tokens"});
  spec.clients = static_cast<uint32_t>(
      Integer(Required(c, "expected", "spec.clients"), "spec.clients.expected", 1, kMaxFlClients));
  if (const YAML::Node q = c["quorum"]) {
    spec.quorum = static_cast<uint32_t>(Integer(q, "spec.clients.quorum", 0, kMaxFlClients));
    if (spec.quorum > spec.clients) {
      Fail("spec.clients.quorum",
           "must be <= spec.clients.expected (" + std::to_string(spec.quorum) + " > " +
               std::to_string(spec.clients) + ")",
           q);
    }
  }
  EachString(c["tokens"], "spec.clients.tokens", "strings",
             [&](const std::string& token, const std::string& path, const YAML::Node& node) {
               if (token.empty()) Fail(path, "must not be empty", node);
               if (std::find(spec.join_tokens.begin(), spec.join_tokens.end(), token) !=
                   spec.join_tokens.end()) {
                 Fail(path, "duplicate token", node);
               }
               spec.join_tokens.push_back(token);
             });
  if (const YAML::Node st = s["stop"]) {
    ExpectMap(st, "spec.stop");
    CheckKeys(st, "spec.stop", {"rounds", "accuracy"});
    if (const YAML::Node r = st["rounds"]) {
      spec.rounds = static_cast<uint32_t>(Integer(r, "spec.stop.rounds", 0, 1000000000));
    }
    if (const YAML::Node acc = st["accuracy"]) {
      spec.target_accuracy = Number(acc, "spec.stop.accuracy");
      if (!(spec.target_accuracy > 0 && spec.target_accuracy <= 1)) {
        Fail("spec.stop.accuracy", "must be > 0 and <= 1, got " + acc.Scalar(), acc);
      }
    }
  }
  if (const YAML::Node dl = s["deadlines"]) {
    ExpectMap(dl, "spec.deadlines");
    CheckKeys(dl, "spec.deadlines", {"round"});
    if (const YAML::Node r = dl["round"]) {
      spec.round_deadline_s = Duration(r, "spec.deadlines.round");
    }
  }
  if (const YAML::Node tr = s["training"]) {
    ExpectMap(tr, "spec.training");
    CheckKeys(tr, "spec.training", {"localSteps", "learningRate", "batchSize"});
    if (const YAML::Node n = tr["localSteps"]) {
      spec.local_steps = static_cast<uint32_t>(Integer(n, "spec.training.localSteps", 1, 1000000));
    }
    if (const YAML::Node lr = tr["learningRate"]) {
      spec.learning_rate = Number(lr, "spec.training.learningRate");
      if (!(spec.learning_rate > 0)) {
        Fail("spec.training.learningRate", "must be > 0, got " + lr.Scalar(), lr);
      }
    }
    if (const YAML::Node b = tr["batchSize"]) {
      spec.batch_size = static_cast<uint32_t>(Integer(b, "spec.training.batchSize", 1, 65536));
    }
  }
  if (const YAML::Node ag = s["aggregation"]) {
    ExpectMap(ag, "spec.aggregation");
    CheckKeys(ag, "spec.aggregation",
              {"maxStaleness", "maxFanIn", "maxLeaves", "device", "robust", "wireFormats", "lora"});
    if (const YAML::Node n = ag["maxStaleness"]) {
      spec.staleness_limit =
          static_cast<uint32_t>(Integer(n, "spec.aggregation.maxStaleness", 0, 1000000));
    }
    if (const YAML::Node n = ag["maxFanIn"]) {
      spec.max_fan_in =
          static_cast<uint32_t>(Integer(n, "spec.aggregation.maxFanIn", 1, kMaxFlFanIn));
    }
    if (const YAML::Node n = ag["maxLeaves"]) {
      spec.max_leaves =
          static_cast<uint32_t>(Integer(n, "spec.aggregation.maxLeaves", 1, kMaxScale));
    }
    if (const YAML::Node n = ag["device"]) {
      static constexpr const char* kDevices[] = {"auto", "cpu", "gpu"};
      spec.aggregation_device = OneOf(n, "spec.aggregation.device", "device", kDevices);
    }
    if (const YAML::Node r = ag["robust"]) ParseRobust(r, spec.robust);
    if (const YAML::Node wf = ag["wireFormats"]) ParseWireFormats(wf, spec.wire_formats);
    if (const YAML::Node l = ag["lora"]) ParseLoraAggregation(l, spec.lora);
  }
  if (const YAML::Node pv = s["privacy"]) {
    ExpectMap(pv, "spec.privacy");
    CheckKeys(pv, "spec.privacy", {"dp", "secureAggregation"});
    if (const YAML::Node dp = pv["dp"]) ParseDp(dp, spec);
    if (const YAML::Node sa = pv["secureAggregation"]) {
      ParseSecureAggregation(sa, spec.privacy.secure_aggregation);
    }
  }
  if (const YAML::Node f = s["flower"]) ParseFlower(f, spec.flower);
  if (const YAML::Node d = s["durability"]) ParseDurability(d, spec);
  CheckQuantizedWireFormats(spec, s);
  CheckLora(spec, s);
  return spec;
}

// spec.aggregation.wireFormats: a non-empty list of distinct update formats (the names are
// shoal/fl/wire/dtype.h's UpdateDTypeFromName; the leaf refuses any other with this path).
void DocumentParser::ParseWireFormats(const YAML::Node& n, std::vector<std::string>& out) const {
  static constexpr const char* kFormats[] = {"f32", "bf16", "f16", "int8", "int4"};
  const std::string path = "spec.aggregation.wireFormats";
  if (!n.IsSequence() || n.size() == 0) {
    Fail(path, "must be a non-empty list of formats (f32, bf16, f16, int8, int4)", n);
  }
  out.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string item = path + "[" + std::to_string(i) + "]";
    std::string f = OneOf(n[i], item, "format", kFormats);
    if (std::find(out.begin(), out.end(), f) != out.end()) Fail(item, "duplicate format", n[i]);
    out.push_back(std::move(f));
  }
}

// int8/int4 updates are folded by the leaves only: the rules that read every update at the top
// (robust, DP clipping) and secure aggregation's masked inputs take f32/bf16/f16.
void DocumentParser::CheckQuantizedWireFormats(const FlJobSpec& spec, const YAML::Node& s) const {
  const auto& wf = spec.wire_formats;
  const bool quantized = std::find(wf.begin(), wf.end(), "int8") != wf.end() ||
                         std::find(wf.begin(), wf.end(), "int4") != wf.end();
  if (!quantized) return;
  const char* other = spec.robust.enabled()                     ? "spec.aggregation.robust"
                      : spec.privacy.dp.enabled                 ? "spec.privacy.dp"
                      : spec.privacy.secure_aggregation.enabled ? "spec.privacy.secureAggregation"
                                                                : nullptr;
  if (other != nullptr) {
    Fail("spec.aggregation.wireFormats",
         std::string("int8 and int4 cannot be combined with ") + other +
             " (it reads f32, bf16 or f16 updates)",
         s["aggregation"]["wireFormats"]);
  }
}

// spec.privacy.secureAggregation: {threshold, neighbours, clipRange, bits, stageTimeout}. What
// depends on the rest of the job (the algorithm, spec.clients) is checked by the coordinator.
void DocumentParser::ParseSecureAggregation(const YAML::Node& n, FlSecureAggregationSpec& out) {
  const std::string path = "spec.privacy.secureAggregation";
  ExpectMap(n, path);
  CheckKeys(n, path, {"threshold", "neighbours", "clipRange", "bits", "stageTimeout"});
  out.enabled = true;
  out.threshold = static_cast<uint32_t>(
      Integer(Required(n, "threshold", path), path + ".threshold", 2, kMaxFlClients));
  out.neighbours = static_cast<uint32_t>(
      Integer(Required(n, "neighbours", path), path + ".neighbours", 2, kMaxFlClients));
  if (const YAML::Node c = n["clipRange"]) {
    out.clip_range = Number(c, path + ".clipRange");
    if (!(out.clip_range > 0) || !std::isfinite(out.clip_range)) {
      Fail(path + ".clipRange", "must be a finite number > 0, got " + c.Scalar(), c);
    }
  }
  if (const YAML::Node b = n["bits"]) {
    out.bits = static_cast<uint32_t>(Integer(b, path + ".bits", 1, 31));
  }
  if (const YAML::Node t = n["stageTimeout"])
    out.stage_timeout_s = Duration(t, path + ".stageTimeout");
}

// spec.aggregation.robust: {rule, beta, f, m, rank, clipNorm}; a parameter of another rule
// is refused (it would be silently ignored). What depends on the round size (krum's n > 2f+2,
// flag's rank <= n) and the algorithm is checked by the coordinator at deploy.
void DocumentParser::ParseRobust(const YAML::Node& r, FlRobustSpec& out) const {
  const std::string path = "spec.aggregation.robust";
  ExpectMap(r, path);
  CheckKeys(r, path, {"rule", "beta", "f", "m", "rank", "clipNorm"});
  static constexpr const char* kRules[] = {"none", "median", "trimmedMean", "krum", "flag"};
  if (const YAML::Node n = r["rule"]) out.rule = OneOf(n, path + ".rule", "rule", kRules);
  auto only = [&](const char* key, const char* rule) {
    const YAML::Node n = r[key];
    if (n && out.rule != rule) {
      Fail(path + "." + key,
           std::string("is a parameter of rule ") + rule + ", not " + Quote(out.rule), n);
    }
    return n;
  };
  if (const YAML::Node n = only("beta", "trimmedMean")) {
    out.beta = Number(n, path + ".beta");
    if (!(out.beta >= 0 && out.beta < 0.5)) {
      Fail(path + ".beta",
           "must be >= 0 and < 0.5 (the fraction dropped at each end), got " + n.Scalar(), n);
    }
  }
  if (const YAML::Node n = only("f", "krum")) {
    out.f = static_cast<uint32_t>(Integer(n, path + ".f", 0, 65535));
  }
  if (const YAML::Node n = only("m", "krum")) {
    out.m = static_cast<uint32_t>(Integer(n, path + ".m", 0, 65535));
  }
  if (const YAML::Node n = only("rank", "flag")) {
    out.rank = static_cast<uint32_t>(Integer(n, path + ".rank", 1, 65535));
  }
  if (const YAML::Node n = r["clipNorm"]; n && n.IsScalar() && n.Scalar() == "median") {
    out.clip_median = true;
  } else if (n) {
    double v = 0;
    const std::string& text = n.IsScalar() ? n.Scalar() : std::string();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      Fail(path + ".clipNorm", "must be a number > 0 or median, got " + Quote(text), n);
    }
    out.clip_norm = Number(n, path + ".clipNorm");
    if (!(out.clip_norm > 0)) {
      Fail(path + ".clipNorm",
           "must be > 0 or median (leave it out for no clipping), got " + n.Scalar(), n);
    }
  }
}

}  // namespace shoal::manifest_internal
