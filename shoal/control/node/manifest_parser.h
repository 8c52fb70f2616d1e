// The manifest parser's inside, shared by its three files: DocumentParser reads one YAML
// document (kind Function or FLJob) into its spec and throws ManifestError naming the field's
// path and line. manifest.cc splits the stream into documents and calls it,
// manifest_function.cc parses a Function's spec, manifest_fljob.cc an FLJob's.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/control/node/manifest.h"

namespace shoal::manifest_internal {

// Thrown inside the parser only; the public Parse*Manifests turn it into a Status.
struct ManifestError {
  std::string message;
};

std::string Quote(const std::string& s);
// "a.b" + "c" -> "a.b.c" (the path of a field, for messages).
std::string Join(const std::string& path, const std::string& key);

class DocumentParser {
 public:
  DocumentParser(int line_offset, const NodeConfig& defaults)
      : line_offset_(line_offset), defaults_(defaults) {}

  // Checks apiVersion and kind against `kinds`; returns the kind.
  std::string ParseHeader(const YAML::Node& doc, const std::vector<std::string>& kinds);

  FunctionSpec ParseFunction(const YAML::Node& doc);

  // metadata: name (required) and namespace (optional), both DNS labels, and no keys but
  // `keys`; returns the metadata mapping.
  YAML::Node ParseMetadata(const YAML::Node& doc, std::initializer_list<std::string_view> keys,
                           std::string* name, std::string* ns);

  // spec.security: seccomp.allow, the denied syscalls (seccomp_policy.h) this function needs.
  void ParseSecurity(const YAML::Node& n, SecuritySpec* out);

  // spec.security.onAnomaly (alert | quarantine) and allowedPaths (absolute paths; a prefix
  // when it ends in '/'): what the compromise detector does and which files are never anomalies.
  void ParseDetection(const YAML::Node& n, SecuritySpec* out);

  // spec.autoscaling: policy, target, minScale/maxScale (the same numbers as spec.scale, which
  // must agree when both are given), keepAlive (fixed | histogram) and the policy's params.
  void ParseAutoscaling(const YAML::Node& a, const YAML::Node& scale, FunctionSpec* spec);

  // The policy objects' own checks (ranges, combinations), reported at the param's line.
  void CheckAutoscaling(const YAML::Node& a, const FunctionSpec& spec);

  FlJobSpec ParseFlJob(const YAML::Node& doc);

 private:
  // spec.aggregation.robust: {rule, beta, f, m, rank, clipNorm}; a parameter of another rule
  // is refused (it would be silently ignored). What depends on the round size (krum's n > 2f+2,
  // flag's rank <= n) and the algorithm is checked by the coordinator at deploy.
  void ParseRobust(const YAML::Node& r, FlRobustSpec& out) const;
  // spec.privacy.dp (manifest_fljob_privacy.cc), after the rest of the spec: its checks read the
  // algorithm, the robust rule and spec.clients.expected.
  void ParseDp(const YAML::Node& n, FlJobSpec& spec);
  // spec.flower: {fab, runConfig, trainConfig, evaluate} (manifest_flower.cc).
  void ParseFlower(const YAML::Node& f, FlFlowerSpec& out) const;
  // spec.aggregation.wireFormats and its checks against the rest of the job (manifest_fljob.cc).
  void ParseWireFormats(const YAML::Node& n, std::vector<std::string>& out) const;
  void CheckQuantizedWireFormats(const FlJobSpec& spec, const YAML::Node& s) const;
  // spec.model.lora, spec.aggregation.lora and their checks against the rest of the job
  // (manifest_fljob_lora.cc).
  void ParseLora(const YAML::Node& n, FlLoraSpec& out);
  void ParseLoraAggregation(const YAML::Node& n, FlLoraSpec& out) const;
  void CheckLora(const FlJobSpec& spec, const YAML::Node& s) const;
  // spec.durability {mode, checkpointEvery}, after the rest of the spec: partialSums is refused
  // beside the settings that need the round's whole updates (manifest_fljob_durability.cc).
  void ParseDurability(const YAML::Node& n, FlJobSpec& spec) const;
  // spec.privacy.secureAggregation (manifest_fljob.cc).
  void ParseSecureAggregation(const YAML::Node& n, FlSecureAggregationSpec& out);

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

  double Number(const YAML::Node& node, const std::string& path) const;

  std::string Where(const YAML::Node& node) const;

  [[noreturn]] void Fail(const std::string& path, const std::string& what,
                         const YAML::Node& node) const;

  YAML::Node Required(const YAML::Node& map, const std::string& key, const std::string& path);

  void ExpectMap(const YAML::Node& node, const std::string& path) const;

  // Unknown and repeated keys are errors: a typo must not silently fall back to a default.
  void CheckKeys(const YAML::Node& map, const std::string& path,
                 std::initializer_list<std::string_view> allowed) const;

  std::string String(const YAML::Node& node, const std::string& path) const;

  // The strings of the list at `path` (absent or null: none; not a list: "must be a list of
  // <what>"), each given to fn(value, its path, its node).
  template <class Fn>
  void EachString(const YAML::Node& list, const std::string& path, const char* what, Fn fn) const {
    if (!list || list.IsNull()) return;
    if (!list.IsSequence()) Fail(path, std::string("must be a list of ") + what, list);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string item = path + "[" + std::to_string(i) + "]";
      fn(String(list[i], item), item, list[i]);
    }
  }

  int64_t Integer(const YAML::Node& node, const std::string& path, int64_t lo, int64_t hi) const;

  double Duration(const YAML::Node& node, const std::string& path) const;

  uint64_t Quantity(const YAML::Node& node, const std::string& path) const;

  void CheckDnsLabel(const std::string& value, const std::string& path,
                     const YAML::Node& node) const;

  std::map<std::string, std::string> StringMap(const YAML::Node& node, const std::string& path);

  // spec.inference: what the `inference` handler serves and how it batches. Written into the
  // handler's environment (function_spec.h names the variables).
  void ParseInference(const YAML::Node& n, const std::string& function, HandlerSpec* out);
  // spec.inference.source.lm (manifest_lm_source.cc).
  void ParseLmSource(const YAML::Node& n, HandlerSpec* out);

  void ParseHandler(const YAML::Node& h, HandlerSpec* out);

  void CheckBuiltin(const std::string& name, const std::string& path, const YAML::Node& node) const;

  static bool IsIdentifier(const std::string& s);

  const int line_offset_;
  const NodeConfig& defaults_;
};

}  // namespace shoal::manifest_internal
