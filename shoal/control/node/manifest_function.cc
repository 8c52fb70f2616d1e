// DocumentParser: a Function document's metadata and spec (handler, scale, autoscaling,
// inference, security).
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

FunctionSpec DocumentParser::ParseFunction(const YAML::Node& doc) {
  FunctionSpec spec;
  const YAML::Node meta =
      ParseMetadata(doc, {"name", "namespace", "labels"}, &spec.name, &spec.tenant);
  if (const YAML::Node labels = meta["labels"]) {
    spec.labels = StringMap(labels, "metadata.labels");
  }

  const YAML::Node s = Required(doc, "spec", "");
  ExpectMap(s, "spec");
  CheckKeys(s, "spec",
            {"handler", "concurrency", "scale", "timeout", "keepAlive", "maxBodySize", "resources",
             "autoscaling", "inference", "auth", "security"});
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
    if (const YAML::Node mem = r["memory"])
      spec.memory_bytes = Quantity(mem, "spec.resources.memory");
    if (const YAML::Node gpu = r["gpu"]) {
      spec.gpu = static_cast<uint32_t>(Integer(gpu, "spec.resources.gpu", 0, 64));
    }
  }
  return spec;
}

// spec.security: seccomp.allow, the denied syscalls (seccomp_policy.h) this function needs.
void DocumentParser::ParseSecurity(const YAML::Node& n, SecuritySpec* out) {
  ExpectMap(n, "spec.security");
  CheckKeys(n, "spec.security", {"seccomp", "onAnomaly", "allowedPaths"});
  ParseDetection(n, out);
  const YAML::Node sc = n["seccomp"];
  if (!sc) return;
  ExpectMap(sc, "spec.security.seccomp");
  CheckKeys(sc, "spec.security.seccomp", {"allow"});
  EachString(sc["allow"], "spec.security.seccomp.allow", "syscall names",
             [&](const std::string& name, const std::string& path, const YAML::Node& node) {
               if (!IsKnownSyscall(name)) Fail(path, "unknown syscall " + Quote(name), node);
               if (std::find(out->seccomp_allow.begin(), out->seccomp_allow.end(), name) ==
                   out->seccomp_allow.end()) {
                 out->seccomp_allow.push_back(name);
               }
             });
}

// spec.security.onAnomaly (alert | quarantine) and allowedPaths (absolute paths; a prefix
// when it ends in '/'): what the compromise detector does and which files are never anomalies.
void DocumentParser::ParseDetection(const YAML::Node& n, SecuritySpec* out) {
  if (const YAML::Node a = n["onAnomaly"]) {
    const std::string v = String(a, "spec.security.onAnomaly");
    if (v != "alert" && v != "quarantine") {
      Fail("spec.security.onAnomaly", "must be alert or quarantine, got " + Quote(v), a);
    }
    out->on_anomaly = v;
  }
  EachString(n["allowedPaths"], "spec.security.allowedPaths", "absolute paths",
             [&](const std::string& p, const std::string& path, const YAML::Node& node) {
               if (p.empty() || p[0] != '/') {
                 Fail(path, "must be an absolute path, got " + Quote(p), node);
               }
               out->allowed_paths.push_back(p);
             });
}

// spec.autoscaling: policy, target, minScale/maxScale (the same numbers as spec.scale, which
// must agree when both are given), keepAlive (fixed | histogram) and the policy's params.
void DocumentParser::ParseAutoscaling(const YAML::Node& a, const YAML::Node& scale,
                                      FunctionSpec* spec) {
  const std::string path = "spec.autoscaling";
  ExpectMap(a, path);
  CheckKeys(
      a, path,
      {"policy", "target", "metric", "minScale", "maxScale", "keepAlive", "params", "policyFile"});
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
  if (const YAML::Node m = a["metric"]) {
    as.metric = OneOf(m, path + ".metric", "metric", kAutoscalingMetrics);
    if (as.metric == "tokensInFlight" && !a["target"]) {
      Fail(path + ".target", "metric tokensInFlight needs a target (tokens per instance)", m);
    }
  }
  if (const YAML::Node k = a["keepAlive"]) {
    const std::string v = String(k, path + ".keepAlive");
    if (v != "fixed" && v != "histogram") {
      Fail(
          path + ".keepAlive",
          "must be fixed or histogram (the fixed window itself is spec.keepAlive), got " + Quote(v),
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
        for (const auto& i : AutoscalingParamTable())
          known += (known.empty() ? "" : ", ") + std::string(i.name);
        Fail(ppath, "unknown parameter (known: " + known + ")", it->first);
      }
      if (info->duration) {
        double seconds = 0;
        if (!ParseDuration(String(it->second, ppath), &seconds) || !(seconds >= 0) ||
            seconds > kMaxDurationSeconds) {
          Fail(ppath,
               "must be a duration like 250ms, 30s, 2m or 1h, got " + Quote(it->second.Scalar()),
               it->second);
        }
        as.params[k] = seconds;
      } else {
        as.params[k] = Number(it->second, ppath);
      }
    }
  }
}

// The policy objects' own checks (ranges, combinations), reported at the param's line.
void DocumentParser::CheckAutoscaling(const YAML::Node& a, const FunctionSpec& spec) {
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

// spec.inference: what the `inference` handler serves and how it batches. Written into the
// handler's environment (function_spec.h names the variables).
void DocumentParser::ParseInference(const YAML::Node& n, const std::string& function,
                                    HandlerSpec* out) {
  ExpectMap(n, "spec.inference");
  CheckKeys(
      n, "spec.inference",
      {"modelName", "source", "device", "precision", "threads", "maxBatchSize", "maxQueueDelay"});
  std::string model = function;
  if (const YAML::Node m = n["modelName"]) {
    model = String(m, "spec.inference.modelName");
    CheckDnsLabel(model, "spec.inference.modelName", m);
  }
  const YAML::Node src = Required(n, "source", "spec.inference");
  ExpectMap(src, "spec.inference.source");
  CheckKeys(src, "spec.inference.source", {"flJob", "onnx", "lm"});
  const YAML::Node job = src["flJob"];
  const YAML::Node onnx = src["onnx"];
  const YAML::Node lm = src["lm"];
  if (static_cast<int>(static_cast<bool>(job)) + static_cast<bool>(onnx) + static_cast<bool>(lm) !=
      1) {
    Fail("spec.inference.source", "set exactly one of flJob, onnx or lm", src);
  }
  if (lm) {
    ParseLmSource(lm, out);  // manifest_lm_source.cc
  } else if (job) {
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
  // A language model (source.lm) runs fp32 or int8 weights; the graph executors fp32, fp16, bf16.
  const std::string precision = lm ? one_of("precision", {"fp32", "int8"}, "fp32")
                                   : one_of("precision", {"fp32", "fp16", "bf16"}, "fp32");
  out->env[kInferPrecisionEnv] = precision;
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

void DocumentParser::ParseHandler(const YAML::Node& h, HandlerSpec* out) {
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
      Fail("spec.handler.library", "must be an absolute path, got " + Quote(out->library), library);
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

bool DocumentParser::IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace shoal::manifest_internal
