#include "shoal/control/node/manifest.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <system_error>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "shoal/control/autoscaler/learned_policy.h"
#include "shoal/control/node/manifest_parser.h"
#include "shoal/runtime/sandbox/handler_library.h"
#include "shoal/runtime/sandbox/seccomp_policy.h"

namespace shoal {
using manifest_internal::DocumentParser;
using manifest_internal::ManifestError;
using manifest_internal::Quote;
namespace {

struct Document {
  std::string text;          // as written, without a leading bare `---` line
  std::string parse_text;    // what yaml-cpp reads (keeps the `---` line so lines stay right)
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

// A unit a number may carry ("" for none) and what it stands for: number * mul / div.
struct Unit {
  std::string_view name;
  double mul;
  double div;
};

// `text` ("30s", "1.5Gi", "500m") as its number scaled by its unit from `units`, and the unit;
// false when the number is malformed, negative where `non_negative`, or the unit not in `units`.
bool ScaledNumber(std::string_view text, std::span<const Unit> units, bool non_negative,
                  double* value, std::string_view* unit) {
  double n = 0;
  if (!SplitNumber(text, &n, unit) || (non_negative && n < 0)) return false;
  for (const Unit& u : units) {
    if (*unit == u.name) {
      *value = n * u.mul / u.div;
      return true;
    }
  }
  return false;
}

}  // namespace

bool ParseDuration(std::string_view text, double* seconds) {
  static constexpr Unit kUnits[] = {{"", 1, 1},     {"s", 1, 1},  {"ms", 1, 1000},
                                    {"us", 1, 1e6}, {"m", 60, 1}, {"h", 3600, 1}};
  std::string_view unit;
  return ScaledNumber(text, kUnits, /*non_negative=*/false, seconds, &unit);
}

bool ParseQuantity(std::string_view text, uint64_t* bytes) {
  static constexpr Unit kUnits[] = {{"", 1, 1},
                                    {"K", 1e3, 1},
                                    {"k", 1e3, 1},
                                    {"M", 1e6, 1},
                                    {"G", 1e9, 1},
                                    {"T", 1e12, 1},
                                    {"Ki", 1024.0, 1},
                                    {"Mi", 1048576.0, 1},
                                    {"Gi", 1073741824.0, 1},
                                    {"Ti", 1099511627776.0, 1}};
  double v = 0;
  std::string_view unit;
  if (!ScaledNumber(text, kUnits, /*non_negative=*/true, &v, &unit)) return false;
  if (v >= 9.2e18) return false;
  if (unit.empty() && v != std::floor(v)) return false;  // fractional bytes
  *bytes = static_cast<uint64_t>(std::llround(v));
  return true;
}

bool ParseCpu(std::string_view text, double* cores) {
  static constexpr Unit kUnits[] = {{"", 1, 1}, {"m", 1, 1000}};
  std::string_view unit;
  return ScaledNumber(text, kUnits, /*non_negative=*/true, cores, &unit);
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
    if (len == 0 || i + len > s.size() || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4))
      return i;
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
