#include "shoal/controller/manifest.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <system_error>

#include "shoal/autoscaler/function_autoscaler.h"
#include "shoal/autoscaler/learned_policy.h"
#include "shoal/sandbox/handler_library.h"
#include "shoal/sandbox/seccomp_policy.h"

namespace shoal {
namespace {

// Thrown inside the parser only; ParseFunctionManifests turns it into a Status.
struct ManifestError {
  std::string message;
};

struct Document {
  std::string text;        // as written, without a leading bare `---` line
  std::string parse_text;  // what yaml-cpp reads (keeps the `---` line so lines stay right)
  int parse_first_line = 0;  // 0-based line of parse_text's first line in the whole input
};

bool IsSeparator(std::string_view line, std::string_view marker) {
  if (line.substr(0, 3) != marker) return false;
  return line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r';
}

// Splits a YAML stream on `---` / `...` lines, keeping each document's text and first line so
// that errors report lines of the whole input.
std::vector<Document> SplitDocuments(std::string_view yaml) {
  std::vector<Document> docs;
  Document cur;
  int line_no = 0;
  auto flush = [&] {
    if (!cur.parse_text.empty()) docs.push_back(std::move(cur));
    cur = Document{};
  };
  size_t pos = 0;
  while (pos < yaml.size()) {
    size_t end = yaml.find('\n', pos);
    const size_t next = end == std::string_view::npos ? yaml.size() : end + 1;
    std::string_view line = yaml.substr(pos, next - pos);
    std::string_view bare = line.substr(0, line.find_first_of("\r\n"));
    if (IsSeparator(bare, "---")) {
      flush();
      cur.parse_first_line = line_no;
      cur.parse_text.append(line);
      const bool only_marker = bare.find_first_not_of(" \t", 3) == std::string_view::npos;
      if (!only_marker) cur.text.append(line);
    } else if (IsSeparator(bare, "...")) {
      flush();
    } else {
      if (cur.parse_text.empty()) cur.parse_first_line = line_no;
      cur.parse_text.append(line);
      cur.text.append(line);
    }
    pos = next;
    ++line_no;
  }
  flush();
  return docs;
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

class DocumentParser {
 public:
  DocumentParser(int line_offset, const NodeConfig& defaults)
      : line_offset_(line_offset), defaults_(defaults) {}

  // Checks apiVersion and kind against `kinds`; returns the kind.
  std::string ParseHeader(const YAML::Node& doc, const std::vector<std::string>& kinds) {
    if (!doc.IsMap()) Fail("", "document must be a mapping of apiVersion, kind, metadata, spec", doc);
    CheckKeys(doc, "", {"apiVersion", "kind", "metadata", "spec"});
    const YAML::Node api = doc["apiVersion"];
    if (!api) throw ManifestError{"apiVersion: expected " + std::string(kFunctionApiVersion)};
    if (String(api, "apiVersion") != kFunctionApiVersion) {
      Fail("apiVersion",
           "expected " + std::string(kFunctionApiVersion) + ", got " + api.Scalar(), api);
    }
    std::string expected;
    for (const std::string& k : kinds) expected += (expected.empty() ? "" : " or ") + k;
    const YAML::Node kind = doc["kind"];
    if (!kind) throw ManifestError{"kind: expected " + expected};
    const std::string k = String(kind, "kind");
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) {
      Fail("kind", "expected " + expected + ", got " + kind.Scalar(), kind);
    }
    return k;
  }

  FunctionSpec ParseFunction(const YAML::Node& doc) {
    FunctionSpec spec;
    const YAML::Node meta = Required(doc, "metadata", "");
    ExpectMap(meta, "metadata");
    CheckKeys(meta, "metadata", {"name", "namespace", "labels"});
    const YAML::Node name = Required(meta, "name", "metadata");
    spec.name = String(name, "metadata.name");
    CheckDnsLabel(spec.name, "metadata.name", name);
    if (const YAML::Node ns = meta["namespace"]) {
      spec.tenant = String(ns, "metadata.namespace");
      CheckDnsLabel(spec.tenant, "metadata.namespace", ns);
    }
    if (const YAML::Node labels = meta["labels"]) {
      spec.labels = StringMap(labels, "metadata.labels");
    }

    const YAML::Node s = Required(doc, "spec", "");
    ExpectMap(s, "spec");
    CheckKeys(s, "spec",
              {"handler", "concurrency", "scale", "timeout", "keepAlive", "maxBodySize",
               "resources", "autoscaling", "inference", "auth",
               "security"});
    ParseHandler(Required(s, "handler", "spec"), &spec.handler);
    if (spec.handler.builtin == "inference") {
      const YAML::Node inf = s["inference"];
      if (!inf) {
        Fail("spec.inference",
             "required for handler inference (at least source: {flJob: JOB} or {onnx: /path})",
             s["handler"]);
      }
      ParseInference(inf, spec.name, &spec.handler);
    } else if (const YAML::Node inf = s["inference"]) {
      Fail("spec.inference", "only applies to handler: inference", inf);
    }

    spec.concurrency = defaults_.default_concurrency;
    if (const YAML::Node c = s["concurrency"]) {
      spec.concurrency = static_cast<uint32_t>(Integer(c, "spec.concurrency", 1, kMaxConcurrency));
    }
    spec.min_scale = 0;
    spec.max_scale = 0;
    if (const YAML::Node scale = s["scale"]) {
      ExpectMap(scale, "spec.scale");
      CheckKeys(scale, "spec.scale", {"min", "max"});
      if (const YAML::Node mn = scale["min"]) {
        spec.min_scale = static_cast<uint32_t>(Integer(mn, "spec.scale.min", 0, kMaxScale));
      }
      if (const YAML::Node max_node = scale["max"]) {
        spec.max_scale = static_cast<uint32_t>(Integer(max_node, "spec.scale.max", 1, kMaxScale));
        if (spec.max_scale < spec.min_scale) {
          Fail("spec.scale.max",
               "must be >= spec.scale.min (" + std::to_string(spec.min_scale) + " > " +
                   std::to_string(spec.max_scale) + ")",
               max_node);
        }
      }
    }
    if (const YAML::Node sec = s["security"]) ParseSecurity(sec, &spec.security);
    const YAML::Node autoscaling = s["autoscaling"];
    if (autoscaling) ParseAutoscaling(autoscaling, s["scale"], &spec);
    if (spec.max_scale == 0) {
      // No max: the node default, raised to min so that a manifest giving only min stays valid.
      spec.max_scale = std::min(kMaxScale, std::max(defaults_.default_max_scale, spec.min_scale));
      spec.max_scale = std::max<uint32_t>(spec.max_scale, 1);
    }

    spec.timeout_s = defaults_.default_timeout_s;
    if (const YAML::Node t = s["timeout"]) spec.timeout_s = Duration(t, "spec.timeout");
    spec.keep_alive_s = defaults_.default_keep_alive_s;
    if (const YAML::Node k = s["keepAlive"]) spec.keep_alive_s = Duration(k, "spec.keepAlive");
    if (autoscaling) CheckAutoscaling(autoscaling, spec);
    if (const YAML::Node a = s["auth"]) {
      const std::string mode = String(a, "spec.auth");
      if (mode != "token" && mode != "none") {
        Fail("spec.auth", "must be token or none, got " + Quote(mode), a);
      }
      spec.require_token = mode == "token";
    }
    spec.max_body_bytes = defaults_.max_body_bytes;
    if (const YAML::Node b = s["maxBodySize"]) {
      spec.max_body_bytes = Quantity(b, "spec.maxBodySize");
      if (spec.max_body_bytes == 0) Fail("spec.maxBodySize", "must be > 0", b);
      if (spec.max_body_bytes > defaults_.max_body_bytes) {
        Fail("spec.maxBodySize",
             "must be <= the node's max_body_bytes (" + std::to_string(defaults_.max_body_bytes) +
                 "), got " + std::to_string(spec.max_body_bytes),
             b);
      }
    }
    if (const YAML::Node r = s["resources"]) {
      ExpectMap(r, "spec.resources");
      CheckKeys(r, "spec.resources", {"cpu", "memory", "gpu"});
      if (const YAML::Node cpu = r["cpu"]) {
        if (!ParseCpu(String(cpu, "spec.resources.cpu"), &spec.cpu)) {
          Fail("spec.resources.cpu",
               "must be cores (0.5) or millicores (500m), got " + Quote(cpu.Scalar()), cpu);
        }
      }
      if (const YAML::Node mem = r["memory"]) spec.memory_bytes = Quantity(mem, "spec.resources.memory");
      if (const YAML::Node gpu = r["gpu"]) {
        spec.gpu = static_cast<uint32_t>(Integer(gpu, "spec.resources.gpu", 0, 64));
      }
    }
    return spec;
  }

  // spec.security: seccomp.allow, the denied syscalls (seccomp_policy.h) this function needs.
  void ParseSecurity(const YAML::Node& n, SecuritySpec* out) {
    ExpectMap(n, "spec.security");
    CheckKeys(n, "spec.security", {"seccomp", "onAnomaly", "allowedPaths"});
    ParseDetection(n, out);
    const YAML::Node sc = n["seccomp"];
    if (!sc) return;
    ExpectMap(sc, "spec.security.seccomp");
    CheckKeys(sc, "spec.security.seccomp", {"allow"});
    const YAML::Node allow = sc["allow"];
    if (!allow || allow.IsNull()) return;
    if (!allow.IsSequence()) Fail("spec.security.seccomp.allow", "must be a list of syscall names", allow);
    for (size_t i = 0; i < allow.size(); ++i) {
      const std::string path = "spec.security.seccomp.allow[" + std::to_string(i) + "]";
      const std::string name = String(allow[i], path);
      if (!IsKnownSyscall(name)) Fail(path, "unknown syscall " + Quote(name), allow[i]);
      if (std::find(out->seccomp_allow.begin(), out->seccomp_allow.end(), name) ==
          out->seccomp_allow.end()) {
        out->seccomp_allow.push_back(name);
      }
    }
  }

  // spec.security.onAnomaly (alert | quarantine) and allowedPaths (absolute paths; a prefix
  // when it ends in '/'): what the compromise detector does and which files are never anomalies.
  void ParseDetection(const YAML::Node& n, SecuritySpec* out) {
    if (const YAML::Node a = n["onAnomaly"]) {
      const std::string v = String(a, "spec.security.onAnomaly");
      if (v != "alert" && v != "quarantine") {
        Fail("spec.security.onAnomaly", "must be alert or quarantine, got " + Quote(v), a);
      }
      out->on_anomaly = v;
    }
    const YAML::Node paths = n["allowedPaths"];
    if (!paths || paths.IsNull()) return;
    if (!paths.IsSequence()) Fail("spec.security.allowedPaths", "must be a list of absolute paths", paths);
    for (size_t i = 0; i < paths.size(); ++i) {
      const std::string path = "spec.security.allowedPaths[" + std::to_string(i) + "]";
      const std::string p = String(paths[i], path);
      if (p.empty() || p[0] != '/') Fail(path, "must be an absolute path, got " + Quote(p), paths[i]);
      out->allowed_paths.push_back(p);
    }
  }

  // spec.autoscaling: policy, target, minScale/maxScale (the same numbers as spec.scale, which
  // must agree when both are given), keepAlive (fixed | histogram) and the policy's params.
  void ParseAutoscaling(const YAML::Node& a, const YAML::Node& scale, FunctionSpec* spec) {
    const std::string path = "spec.autoscaling";
    ExpectMap(a, path);
    CheckKeys(a, path,
              {"policy", "target", "minScale", "maxScale", "keepAlive", "params", "policyFile"});
    AutoscalingSpec& as = spec->autoscaling;
    as.policy = kDefaultAutoscalingPolicy;
    if (const YAML::Node p = a["policy"]) {
      as.policy = OneOf(p, path + ".policy", "policy", kAutoscalingPolicies);
    }
    if (const YAML::Node f = a["policyFile"]) as.policy_file = String(f, path + ".policyFile");
    if (const YAML::Node t = a["target"]) {
      as.target = Number(t, path + ".target");
      if (!(as.target > 0)) Fail(path + ".target", "must be > 0, got " + t.Scalar(), t);
    }
    if (const YAML::Node k = a["keepAlive"]) {
      const std::string v = String(k, path + ".keepAlive");
      if (v != "fixed" && v != "histogram") {
        Fail(path + ".keepAlive",
             "must be fixed or histogram (the fixed window itself is spec.keepAlive), got " +
                 Quote(v),
             k);
      }
      as.keep_alive = v;
    }
    auto bound = [&](const char* key, const char* scale_key, uint32_t lo, uint32_t* out) {
      const YAML::Node n = a[key];
      if (!n) return;
      const auto v = static_cast<uint32_t>(Integer(n, path + "." + key, lo, kMaxScale));
      if (scale && scale[scale_key] && *out != v) {
        Fail(path + "." + key,
             "disagrees with spec.scale." + std::string(scale_key) + " (" + std::to_string(v) +
                 " vs " + std::to_string(*out) + "); give one of them",
             n);
      }
      *out = v;
    };
    bound("minScale", "min", 0, &spec->min_scale);
    bound("maxScale", "max", 1, &spec->max_scale);
    if (spec->max_scale != 0 && spec->max_scale < spec->min_scale) {
      Fail(path + ".maxScale",
           "must be >= the minimum scale (" + std::to_string(spec->min_scale) + " > " +
               std::to_string(spec->max_scale) + ")",
           a["maxScale"] ? a["maxScale"] : a);
    }
    if (const YAML::Node params = a["params"]; params && !params.IsNull()) {
      ExpectMap(params, path + ".params");
      for (auto it = params.begin(); it != params.end(); ++it) {
        if (!it->first.IsScalar() || it->first.Scalar().empty()) {
          Fail(path + ".params", "keys must be non-empty strings", it->first);
        }
        const std::string& k = it->first.Scalar();
        const std::string ppath = path + ".params." + k;
        if (as.params.count(k)) Fail(ppath, "duplicate field", it->first);
        const AutoscalingParamInfo* info = FindAutoscalingParam(k);
        if (info == nullptr) {
          std::string known;
          for (const auto& i : AutoscalingParamTable()) known += (known.empty() ? "" : ", ") + std::string(i.name);
          Fail(ppath, "unknown parameter (known: " + known + ")", it->first);
        }
        if (info->duration) {
          double seconds = 0;
          if (!ParseDuration(String(it->second, ppath), &seconds) || !(seconds >= 0) ||
              seconds > kMaxDurationSeconds) {
            Fail(ppath, "must be a duration like 250ms, 30s, 2m or 1h, got " +
                            Quote(it->second.Scalar()), it->second);
          }
          as.params[k] = seconds;
        } else {
          as.params[k] = Number(it->second, ppath);
        }
      }
    }
  }

  // The policy objects' own checks (ranges, combinations), reported at the param's line.
  void CheckAutoscaling(const YAML::Node& a, const FunctionSpec& spec) {
    const AutoscalingConfig c = AutoscalingConfigOf(spec);
    Status st = BuildAutoscalingParams(c, nullptr, nullptr, nullptr);
    // A trained table this host can read is checked now, so a corrupt or incompatible file is
    // refused at deploy rather than logged by the node that falls back to reactive scaling. One
    // this host cannot see is left to the nodes (in a cluster the file lives on them).
    if (st.ok() && c.policy == "learned" && !c.policy_file.empty()) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(c.policy_file, ec)) {
        auto model = LearnedModel::Load(c.policy_file);
        if (!model.ok()) st = InvalidArgument("policyFile: " + model.status().message());
      }
    }
    if (st.ok()) return;
    // Messages start with "params.<name>: " or "<field>: ".
    const std::string& m = st.message();
    const size_t colon = m.find(": ");
    const std::string field = colon == std::string::npos ? "" : m.substr(0, colon);
    const std::string what = colon == std::string::npos ? m : m.substr(colon + 2);
    YAML::Node at = a;
    if (field.rfind("params.", 0) == 0 && a["params"] && a["params"][field.substr(7)]) {
      at = a["params"][field.substr(7)];
    } else if (!field.empty() && field != "params" && a[field]) {
      at = a[field];
    } else if (field == "params" && a["params"]) {
      at = a["params"];
    }
    Fail("spec.autoscaling" + (field.empty() ? "" : "." + field), what, at);
  }

  FlJobSpec ParseFlJob(const YAML::Node& doc) {
    FlJobSpec spec;
    const YAML::Node meta = Required(doc, "metadata", "");
    ExpectMap(meta, "metadata");
    CheckKeys(meta, "metadata", {"name", "namespace"});
    const YAML::Node name = Required(meta, "name", "metadata");
    spec.name = String(name, "metadata.name");
    CheckDnsLabel(spec.name, "metadata.name", name);
    if (const YAML::Node ns = meta["namespace"]) {
      spec.tenant = String(ns, "metadata.namespace");
      CheckDnsLabel(spec.tenant, "metadata.namespace", ns);
    }

    const YAML::Node s = Required(doc, "spec", "");
    ExpectMap(s, "spec");
    CheckKeys(
        s, "spec",
        {"algorithm", "model", "data", "clients", "stop", "deadlines", "training", "aggregation"});
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
      CheckKeys(m, "spec.model", {"architecture", "hidden", "initial", "seed"});
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
    spec.clients = static_cast<uint32_t>(Integer(Required(c, "expected", "spec.clients"),
                                                 "spec.clients.expected", 1, kMaxFlClients));
    if (const YAML::Node q = c["quorum"]) {
      spec.quorum = static_cast<uint32_t>(Integer(q, "spec.clients.quorum", 0, kMaxFlClients));
      if (spec.quorum > spec.clients) {
        Fail("spec.clients.quorum",
             "must be <= spec.clients.expected (" + std::to_string(spec.quorum) + " > " +
                 std::to_string(spec.clients) + ")",
             q);
      }
    }
    if (const YAML::Node t = c["tokens"]; t && !t.IsNull()) {
      if (!t.IsSequence()) Fail("spec.clients.tokens", "must be a list of strings", t);
      for (size_t i = 0; i < t.size(); ++i) {
        const std::string path = "spec.clients.tokens[" + std::to_string(i) + "]";
        std::string token = String(t[i], path);
        if (token.empty()) Fail(path, "must not be empty", t[i]);
        if (std::find(spec.join_tokens.begin(), spec.join_tokens.end(), token) !=
            spec.join_tokens.end()) {
          Fail(path, "duplicate token", t[i]);
        }
        spec.join_tokens.push_back(std::move(token));
      }
    }
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
        spec.local_steps =
            static_cast<uint32_t>(Integer(n, "spec.training.localSteps", 1, 1000000));
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
                {"maxStaleness", "maxFanIn", "maxLeaves", "device", "robust"});
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
    }
    return spec;
  }

 private:
  // spec.aggregation.robust: {rule, beta, f, m, rank, clipNorm}; a parameter of another rule
  // is refused (it would be silently ignored). What depends on the round size (krum's n > 2f+2,
  // flag's rank <= n) and the algorithm is checked by the coordinator at deploy.
  void ParseRobust(const YAML::Node& r, FlRobustSpec& out) const {
    const std::string path = "spec.aggregation.robust";
    ExpectMap(r, path);
    CheckKeys(r, path, {"rule", "beta", "f", "m", "rank", "clipNorm"});
    static constexpr const char* kRules[] = {"none", "median", "trimmedMean", "krum", "flag"};
    if (const YAML::Node n = r["rule"]) out.rule = OneOf(n, path + ".rule", "rule", kRules);
    auto only = [&](const char* key, const char* rule) {
      const YAML::Node n = r[key];
      if (n && out.rule != rule) {
        Fail(path + "." + key, std::string("is a parameter of rule ") + rule + ", not " +
                                   Quote(out.rule),
             n);
      }
      return n;
    };
    if (const YAML::Node n = only("beta", "trimmedMean")) {
      out.beta = Number(n, path + ".beta");
      if (!(out.beta >= 0 && out.beta < 0.5)) {
        Fail(path + ".beta", "must be >= 0 and < 0.5 (the fraction dropped at each end), got " +
                                 n.Scalar(),
             n);
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

  template <size_t N>
  std::string OneOf(const YAML::Node& node, const std::string& path, const char* what,
                    const char* const (&names)[N]) const {
    std::string value = String(node, path);
    std::string list;
    for (const char* n : names) {
      if (value == n) return value;
      list += (list.empty() ? "" : ", ") + std::string(n);
    }
    Fail(path, std::string("unknown ") + what + " " + Quote(value) + " (one of: " + list + ")",
         node);
  }

  double Number(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) Fail(path, "must be a number", node);
    const std::string& s = node.Scalar();
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
      Fail(path, "must be a number, got " + Quote(s), node);
    }
    return v;
  }

  std::string Where(const YAML::Node& node) const {
    const YAML::Mark m = node.Mark();
    if (m.line < 0) return "";
    return " (line " + std::to_string(m.line + line_offset_ + 1) + ")";
  }

  [[noreturn]] void Fail(const std::string& path, const std::string& what,
                         const YAML::Node& node) const {
    throw ManifestError{(path.empty() ? "" : path + ": ") + what + Where(node)};
  }

  YAML::Node Required(const YAML::Node& map, const std::string& key, const std::string& path) {
    YAML::Node n = map[key];
    if (!n || n.IsNull()) throw ManifestError{Join(path, key) + ": required"};
    return n;
  }

  void ExpectMap(const YAML::Node& node, const std::string& path) const {
    if (!node.IsMap()) Fail(path, "must be a mapping", node);
  }

  // Unknown and repeated keys are errors: a typo must not silently fall back to a default.
  void CheckKeys(const YAML::Node& map, const std::string& path,
                 std::initializer_list<std::string_view> allowed) const {
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) Fail(path, "keys must be strings", key);
      const std::string& k = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        Fail(Join(path, k), "unknown field", key);
      }
      if (!seen.insert(k).second) Fail(Join(path, k), "duplicate field", key);
    }
  }

  std::string String(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) Fail(path, "must be a string", node);
    return node.Scalar();
  }

  int64_t Integer(const YAML::Node& node, const std::string& path, int64_t lo, int64_t hi) const {
    if (!node.IsScalar()) Fail(path, "must be an integer", node);
    const std::string& s = node.Scalar();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
      Fail(path, "must be an integer, got " + Quote(s), node);
    }
    if (v < lo || v > hi) {
      Fail(path,
           "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + s,
           node);
    }
    return v;
  }

  double Duration(const YAML::Node& node, const std::string& path) const {
    double seconds = 0;
    if (!ParseDuration(String(node, path), &seconds)) {
      Fail(path, "must be a duration like 250ms, 30s, 2m or 1h, got " + Quote(node.Scalar()),
           node);
    }
    if (!(seconds > 0)) Fail(path, "must be > 0, got " + node.Scalar(), node);
    // A week is far beyond any timeout or keep-alive that makes sense, and keeps the runtime's
    // millisecond and nanosecond conversions from overflowing.
    if (seconds > kMaxDurationSeconds) {
      Fail(path, "must be at most 168h, got " + node.Scalar(), node);
    }
    return seconds;
  }

  uint64_t Quantity(const YAML::Node& node, const std::string& path) const {
    uint64_t bytes = 0;
    if (!ParseQuantity(String(node, path), &bytes)) {
      Fail(path, "must be a quantity like 1048576, 64Ki or 1Gi, got " + Quote(node.Scalar()),
           node);
    }
    return bytes;
  }

  void CheckDnsLabel(const std::string& value, const std::string& path,
                     const YAML::Node& node) const {
    if (!IsDnsLabel(value)) {
      Fail(path,
           "must be a DNS label (lower-case letters, digits and '-', starting and ending with a "
           "letter or digit, at most 63 characters), got " +
               Quote(value),
           node);
    }
  }

  std::map<std::string, std::string> StringMap(const YAML::Node& node, const std::string& path) {
    std::map<std::string, std::string> out;
    if (node.IsNull()) return out;
    ExpectMap(node, path);
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) Fail(path, "keys must be strings", it->first);
      const std::string& k = it->first.Scalar();
      if (k.empty()) Fail(path, "keys must not be empty", it->first);
      if (out.count(k)) Fail(Join(path, k), "duplicate field", it->first);
      out[k] = String(it->second, Join(path, k));
    }
    return out;
  }

  // spec.inference: what the `inference` handler serves and how it batches. Written into the
  // handler's environment (function_spec.h names the variables).
  void ParseInference(const YAML::Node& n, const std::string& function, HandlerSpec* out) {
    ExpectMap(n, "spec.inference");
    CheckKeys(n, "spec.inference",
              {"modelName", "source", "device", "precision", "threads", "maxBatchSize",
               "maxQueueDelay"});
    std::string model = function;
    if (const YAML::Node m = n["modelName"]) {
      model = String(m, "spec.inference.modelName");
      CheckDnsLabel(model, "spec.inference.modelName", m);
    }
    const YAML::Node src = Required(n, "source", "spec.inference");
    ExpectMap(src, "spec.inference.source");
    CheckKeys(src, "spec.inference.source", {"flJob", "onnx"});
    const YAML::Node job = src["flJob"];
    const YAML::Node onnx = src["onnx"];
    if (static_cast<bool>(job) == static_cast<bool>(onnx)) {
      Fail("spec.inference.source", "set exactly one of flJob or onnx", src);
    }
    if (job) {
      const std::string name = String(job, "spec.inference.source.flJob");
      CheckDnsLabel(name, "spec.inference.source.flJob", job);
      out->env[kInferFlJobEnv] = name;
    } else {
      const std::string path = String(onnx, "spec.inference.source.onnx");
      if (path.empty() || path[0] != '/') {
        Fail("spec.inference.source.onnx", "must be an absolute path, got " + Quote(path), onnx);
      }
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec)) {
        Fail("spec.inference.source.onnx", "no such file on this node: " + path, onnx);
      }
      out->env[kInferOnnxEnv] = path;
    }
    auto one_of = [&](const char* key, std::initializer_list<std::string_view> values,
                      const char* fallback) {
      const YAML::Node v = n[key];
      if (!v) return std::string(fallback);
      const std::string path = std::string("spec.inference.") + key;
      const std::string s = String(v, path);
      if (std::find(values.begin(), values.end(), s) == values.end()) {
        std::string names;
        for (std::string_view x : values) names += (names.empty() ? "" : " | ") + std::string(x);
        Fail(path, "must be " + names + ", got " + Quote(s), v);
      }
      return s;
    };
    out->env[kInferModelEnv] = model;
    out->env[kInferDeviceEnv] = one_of("device", {"auto", "cpu", "cuda"}, "auto");
    out->env[kInferPrecisionEnv] = one_of("precision", {"fp32", "fp16", "bf16"}, "fp32");
    if (const YAML::Node t = n["threads"]) {  // 0 (the default): every core
      out->env[kInferThreadsEnv] = std::to_string(Integer(t, "spec.inference.threads", 0, 1024));
    }
    int64_t max_batch = kDefaultInferMaxBatch;
    if (const YAML::Node b = n["maxBatchSize"]) {
      max_batch = Integer(b, "spec.inference.maxBatchSize", 1, kMaxInferBatch);
    }
    out->env[kInferMaxBatchEnv] = std::to_string(max_batch);
    double delay_s = kDefaultInferMaxQueueDelayS;
    if (const YAML::Node d = n["maxQueueDelay"]) {
      if (!ParseDuration(String(d, "spec.inference.maxQueueDelay"), &delay_s) || delay_s < 0) {
        Fail("spec.inference.maxQueueDelay",
             "must be a duration like 500us, 2ms or 0 (no waiting), got " + Quote(d.Scalar()), d);
      }
      if (delay_s > 1.0) {
        Fail("spec.inference.maxQueueDelay", "must be at most 1s, got " + d.Scalar(), d);
      }
    }
    out->env[kInferMaxDelayEnv] = std::to_string(static_cast<int64_t>(delay_s * 1e6 + 0.5));
  }

  void ParseHandler(const YAML::Node& h, HandlerSpec* out) {
    if (h.IsScalar()) {  // `handler: echo` is short for `handler: {builtin: echo}`
      out->builtin = h.Scalar();
      CheckBuiltin(out->builtin, "spec.handler", h);
      return;
    }
    ExpectMap(h, "spec.handler");
    CheckKeys(h, "spec.handler", {"builtin", "library", "symbol", "env"});
    const YAML::Node builtin = h["builtin"];
    const YAML::Node library = h["library"];
    if (static_cast<bool>(builtin) == static_cast<bool>(library)) {
      Fail("spec.handler", "set exactly one of builtin or library", h);
    }
    if (builtin) {
      out->builtin = String(builtin, "spec.handler.builtin");
      CheckBuiltin(out->builtin, "spec.handler.builtin", builtin);
      if (const YAML::Node sym = h["symbol"]) {
        Fail("spec.handler.symbol", "only applies to spec.handler.library", sym);
      }
    } else {
      out->library = String(library, "spec.handler.library");
      if (out->library.empty() || out->library[0] != '/') {
        Fail("spec.handler.library", "must be an absolute path, got " + Quote(out->library),
             library);
      }
      // Only code the node's operator installed: below a handler directory, nothing on the
      // way writable by anyone but root, no symlink (checked again when each instance starts).
      auto fd = OpenHandlerLibrary(out->library, ResolveHandlerDirs(defaults_.handler_dirs));
      if (!fd.ok()) Fail("spec.handler.library", fd.status().message(), library);
      if (const YAML::Node sym = h["symbol"]) {
        out->symbol = String(sym, "spec.handler.symbol");
        if (!IsIdentifier(out->symbol)) {
          Fail("spec.handler.symbol", "must be a C identifier, got " + Quote(out->symbol), sym);
        }
      }
    }
    if (const YAML::Node env = h["env"]) {
      out->env = StringMap(env, "spec.handler.env");
      for (auto it = env.begin(); it != env.end(); ++it) {
        if (!IsIdentifier(it->first.Scalar())) {
          Fail("spec.handler.env." + it->first.Scalar(),
               "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", it->first);
        }
        if (std::string why = CodeLoadingEnvReason(it->first.Scalar()); !why.empty()) {
          Fail("spec.handler.env." + it->first.Scalar(), "not allowed: " + why, it->first);
        }
      }
    }
  }

  void CheckBuiltin(const std::string& name, const std::string& path,
                    const YAML::Node& node) const {
    bool known = false;
    std::string names;
    for (const char* b : kBuiltinHandlers) {
      known = known || name == b;
      names += (names.empty() ? "" : ", ") + std::string(b);
    }
    if (!known) {
      Fail(path, "unknown built-in handler " + Quote(name) + " (one of: " + names + ")", node);
    }
  }

  static bool IsIdentifier(const std::string& s) {
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
    for (char c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    }
    return true;
  }

  const int line_offset_;
  const NodeConfig& defaults_;
};

// Splits "30s" into its number and its unit; false when the number part is malformed.
bool SplitNumber(std::string_view text, double* number, std::string_view* unit) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == '-' || text[i] == '+')) {
    ++i;
  }
  std::string_view num = text.substr(0, i);
  if (!num.empty() && num[0] == '+') num.remove_prefix(1);
  if (num.empty()) return false;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), *number);
  if (ec != std::errc() || p != num.data() + num.size() || !std::isfinite(*number)) return false;
  *unit = text.substr(i);
  return true;
}

}  // namespace

bool ParseDuration(std::string_view text, double* seconds) {
  double n = 0;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit)) return false;
  if (unit.empty() || unit == "s") {
    *seconds = n;
  } else if (unit == "ms") {
    *seconds = n / 1000;
  } else if (unit == "us") {
    *seconds = n / 1e6;
  } else if (unit == "m") {
    *seconds = n * 60;
  } else if (unit == "h") {
    *seconds = n * 3600;
  } else {
    return false;
  }
  return true;
}

bool ParseQuantity(std::string_view text, uint64_t* bytes) {
  double n = 0;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit) || n < 0) return false;
  static const std::pair<std::string_view, double> kUnits[] = {
      {"", 1},          {"K", 1e3},         {"k", 1e3},         {"M", 1e6},
      {"G", 1e9},       {"T", 1e12},        {"Ki", 1024.0},     {"Mi", 1048576.0},
      {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  for (const auto& [name, mult] : kUnits) {
    if (unit != name) continue;
    const double v = n * mult;
    if (v >= 9.2e18) return false;
    if (unit.empty() && v != std::floor(v)) return false;  // fractional bytes
    *bytes = static_cast<uint64_t>(std::llround(v));
    return true;
  }
  return false;
}

bool ParseCpu(std::string_view text, double* cores) {
  double n = 0;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit) || n < 0) return false;
  if (unit.empty()) {
    *cores = n;
  } else if (unit == "m") {
    *cores = n / 1000;
  } else {
    return false;
  }
  return true;
}

bool IsDnsLabel(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-') return false;
  }
  return true;
}

namespace {

constexpr const char* kFunctionKind = "Function";
constexpr const char* kFlJobKind = "FLJob";

// Parses every document, accepting the kinds in `kinds`; nothing is returned unless all are valid.
Result<Manifests> ParseKinds(std::string_view yaml, const NodeConfig& defaults,
                             const std::vector<std::string>& kinds) {
  Manifests out;
  std::map<std::string, int> function_names, job_names;  // name -> line of its metadata.name
  for (Document& doc : SplitDocuments(yaml)) {
    YAML::Node root;
    try {
      root = YAML::Load(doc.parse_text);
    } catch (const YAML::Exception& e) {
      std::string where;
      if (e.mark.line >= 0) {
        where = " (line " + std::to_string(e.mark.line + doc.parse_first_line + 1) + ")";
      }
      return InvalidArgument("YAML syntax error: " + e.msg + where);
    }
    if (!root || root.IsNull()) continue;  // an empty document (comments only)
    try {
      DocumentParser parser(doc.parse_first_line, defaults);
      const std::string kind = parser.ParseHeader(root, kinds);
      std::string name;
      if (kind == kFunctionKind) {
        out.functions.push_back(parser.ParseFunction(root));
        out.functions.back().manifest = doc.text;
        name = out.functions.back().name;
      } else {
        out.jobs.push_back(parser.ParseFlJob(root));
        out.jobs.back().manifest = doc.text;
        name = out.jobs.back().name;
      }
      const YAML::Node& const_root = root;
      const int line = const_root["metadata"]["name"].Mark().line + doc.parse_first_line + 1;
      auto& names = kind == kFunctionKind ? function_names : job_names;
      if (auto [it, inserted] = names.emplace(name, line); !inserted) {
        return InvalidArgument("metadata.name: duplicate " +
                               std::string(kind == kFunctionKind ? "function " : "FLJob ") +
                               Quote(name) + " in one deploy (lines " + std::to_string(it->second) +
                               " and " + std::to_string(line) + ")");
      }
    } catch (const ManifestError& e) {
      return InvalidArgument(e.message);
    } catch (const YAML::Exception& e) {
      return InvalidArgument("YAML error: " + e.msg);
    }
  }
  if (out.functions.empty() && out.jobs.empty()) {
    std::string names;
    for (const std::string& k : kinds) names += (names.empty() ? "" : " or ") + k;
    return InvalidArgument("no " + names + " documents in the manifest");
  }
  return out;
}

// Manifests are YAML text: UTF-8 (the registry persists them as protobuf strings).
std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size() || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    }
    if (len == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) return i;  // overlong, surrogate
    }
    if (len == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) return i;
    }
    i += len;
  }
  return std::nullopt;
}

std::string Utf8Error(std::string_view s, size_t at) {
  const size_t line = 1 + static_cast<size_t>(std::count(s.begin(), s.begin() + at, '\n'));
  return "manifest: not valid UTF-8 (byte " + std::to_string(at) + ", line " +
         std::to_string(line) + ")";
}

}  // namespace

Result<std::vector<FunctionSpec>> ParseFunctionManifests(std::string_view yaml,
                                                         const NodeConfig& defaults) {
  if (auto bad = FirstInvalidUtf8(yaml)) return InvalidArgument(Utf8Error(yaml, *bad));
  auto parsed = ParseKinds(yaml, defaults, {kFunctionKind});
  if (!parsed.ok()) return parsed.status();
  return std::move(parsed->functions);
}

Result<Manifests> ParseManifests(std::string_view yaml, const NodeConfig& defaults) {
  if (auto bad = FirstInvalidUtf8(yaml)) return InvalidArgument(Utf8Error(yaml, *bad));
  return ParseKinds(yaml, defaults, {kFunctionKind, kFlJobKind});
}

Result<std::vector<FlJobSpec>> ParseFlJobManifests(std::string_view yaml) {
  static const NodeConfig kUnused;  // FLJob fields take no node defaults
  if (auto bad = FirstInvalidUtf8(yaml)) return InvalidArgument(Utf8Error(yaml, *bad));
  auto parsed = ParseKinds(yaml, kUnused, {kFlJobKind});
  if (!parsed.ok()) return parsed.status();
  return std::move(parsed->jobs);
}

}  // namespace shoal
