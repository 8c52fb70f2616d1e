// DocumentParser: the document header and the typed readers every field goes through.
#include "shoal/control/node/manifest_parser.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <system_error>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/runtime/sandbox/handler_library.h"
#include "shoal/runtime/sandbox/seccomp_policy.h"

namespace shoal::manifest_internal {

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Checks apiVersion and kind against `kinds`; returns the kind.
std::string DocumentParser::ParseHeader(const YAML::Node& doc,
                                        const std::vector<std::string>& kinds) {
  if (!doc.IsMap()) Fail("", "document must be a mapping of apiVersion, kind, metadata, spec", doc);
  CheckKeys(doc, "", {"apiVersion", "kind", "metadata", "spec"});
  const YAML::Node api = doc["apiVersion"];
  if (!api) throw ManifestError{"apiVersion: expected " + std::string(kFunctionApiVersion)};
  if (String(api, "apiVersion") != kFunctionApiVersion) {
    Fail("apiVersion", "expected " + std::string(kFunctionApiVersion) + ", got " + api.Scalar(),
         api);
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

double DocumentParser::Number(const YAML::Node& node, const std::string& path) const {
  if (!node.IsScalar()) Fail(path, "must be a number", node);
  const std::string& s = node.Scalar();
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    Fail(path, "must be a number, got " + Quote(s), node);
  }
  return v;
}

std::string DocumentParser::Where(const YAML::Node& node) const {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return "";
  return " (line " + std::to_string(m.line + line_offset_ + 1) + ")";
}

void DocumentParser::Fail(const std::string& path, const std::string& what,
                          const YAML::Node& node) const {
  throw ManifestError{(path.empty() ? "" : path + ": ") + what + Where(node)};
}

YAML::Node DocumentParser::Required(const YAML::Node& map, const std::string& key,
                                    const std::string& path) {
  YAML::Node n = map[key];
  if (!n || n.IsNull()) throw ManifestError{Join(path, key) + ": required"};
  return n;
}

void DocumentParser::ExpectMap(const YAML::Node& node, const std::string& path) const {
  if (!node.IsMap()) Fail(path, "must be a mapping", node);
}

// Unknown and repeated keys are errors: a typo must not silently fall back to a default.
void DocumentParser::CheckKeys(const YAML::Node& map, const std::string& path,
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

std::string DocumentParser::String(const YAML::Node& node, const std::string& path) const {
  if (!node.IsScalar()) Fail(path, "must be a string", node);
  return node.Scalar();
}

int64_t DocumentParser::Integer(const YAML::Node& node, const std::string& path, int64_t lo,
                                int64_t hi) const {
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

double DocumentParser::Duration(const YAML::Node& node, const std::string& path) const {
  double seconds = 0;
  if (!ParseDuration(String(node, path), &seconds)) {
    Fail(path, "must be a duration like 250ms, 30s, 2m or 1h, got " + Quote(node.Scalar()), node);
  }
  if (!(seconds > 0)) Fail(path, "must be > 0, got " + node.Scalar(), node);
  // A week is far beyond any timeout or keep-alive that makes sense, and keeps the runtime's
  // millisecond and nanosecond conversions from overflowing.
  if (seconds > kMaxDurationSeconds) {
    Fail(path, "must be at most 168h, got " + node.Scalar(), node);
  }
  return seconds;
}

uint64_t DocumentParser::Quantity(const YAML::Node& node, const std::string& path) const {
  uint64_t bytes = 0;
  if (!ParseQuantity(String(node, path), &bytes)) {
    Fail(path, "must be a quantity like 1048576, 64Ki or 1Gi, got " + Quote(node.Scalar()), node);
  }
  return bytes;
}

void DocumentParser::CheckDnsLabel(const std::string& value, const std::string& path,
                                   const YAML::Node& node) const {
  if (!IsDnsLabel(value)) {
    Fail(path,
         "must be a DNS label (lower-case letters, digits and '-', starting and ending with a "
         "letter or digit, at most 63 characters), got " +
             Quote(value),
         node);
  }
}

std::map<std::string, std::string> DocumentParser::StringMap(const YAML::Node& node,
                                                             const std::string& path) {
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

void DocumentParser::CheckBuiltin(const std::string& name, const std::string& path,
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

YAML::Node DocumentParser::ParseMetadata(const YAML::Node& doc,
                                         std::initializer_list<std::string_view> keys,
                                         std::string* name, std::string* ns) {
  const YAML::Node meta = Required(doc, "metadata", "");
  ExpectMap(meta, "metadata");
  CheckKeys(meta, "metadata", keys);
  const YAML::Node n = Required(meta, "name", "metadata");
  *name = String(n, "metadata.name");
  CheckDnsLabel(*name, "metadata.name", n);
  if (const YAML::Node node = meta["namespace"]) {
    *ns = String(node, "metadata.namespace");
    CheckDnsLabel(*ns, "metadata.namespace", node);
  }
  return meta;
}

}  // namespace shoal::manifest_internal
