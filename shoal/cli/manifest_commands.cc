#include "shoal/cli/manifest_commands.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "shoal/control/node/manifest.h"
#include "shoal/control/schemas/json_schema.h"
#include "shoal/control/schemas/schemas.h"

namespace shoal::cli {
namespace {

using json = nlohmann::ordered_json;

// A YAML node as JSON, plain scalars resolved as YAML 1.2's core schema does (null, booleans,
// integers, floats; everything quoted stays a string), so `replicas: 3` is the integer 3 and
// `name: "3"` the string "3" — what JSON Schema then checks.
json ToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const YAML::Node& item : n) a.push_back(ToJson(item));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (auto it = n.begin(); it != n.end(); ++it) o[it->first.Scalar()] = ToJson(it->second);
      return o;
    }
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& s = n.Scalar();
  if (n.Tag() != "?") return s;  // quoted, or tagged: a string
  static const std::regex kNull("^(~|null|Null|NULL)?$");
  static const std::regex kTrue("^(true|True|TRUE)$");
  static const std::regex kFalse("^(false|False|FALSE)$");
  static const std::regex kInt("^[-+]?[0-9]+$");
  static const std::regex kFloat(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (std::regex_match(s, kNull)) return nullptr;
  if (std::regex_match(s, kTrue)) return true;
  if (std::regex_match(s, kFalse)) return false;
  try {
    if (std::regex_match(s, kInt)) return s[0] == '-' ? json(std::stoll(s)) : json(std::stoull(s));
    if (std::regex_match(s, kFloat)) return std::stod(s);
  } catch (const std::exception&) {  // out of range: leave it to the schema as a string
  }
  return s;
}

bool ReadFile(const std::string& file, std::string* text) {
  if (file == "-") {
    *text = std::string(std::istreambuf_iterator<char>(std::cin), {});
    return true;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  *text = std::string(std::istreambuf_iterator<char>(in), {});
  return true;
}

const api::JsonSchema& ManifestSchema() {
  static const json root = json::parse(api::ManifestSchemaJson());
  static const api::JsonSchema schema = [] {
    auto s = api::JsonSchema::Make(&root);
    if (!s.ok()) {  // the build embeds a schema the checker's test has read: cannot happen
      std::fprintf(stderr, "shoal: the compiled-in manifest schema: %s\n",
                   s.status().message().c_str());
      std::abort();
    }
    return *s;
  }();
  return schema;
}

// 0 valid, 1 invalid, 2 unreadable.
int ValidateFile(const std::string& file, ValidateAgainst against) {
  std::string text;
  if (!ReadFile(file, &text)) {
    std::fprintf(stderr, "%s: cannot read the file\n", file.c_str());
    return 2;
  }
  std::vector<std::string> errors;
  std::vector<std::string> names;
  if (against != ValidateAgainst::kParser) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      std::fprintf(stderr, "%s: not YAML or JSON: %s\n", file.c_str(), e.what());
      return 1;
    }
    size_t n = 0;
    for (const YAML::Node& doc : docs) {
      if (doc.IsNull()) continue;  // an empty document, as the parser skips
      ++n;
      const json j = ToJson(doc);
      if (j.is_object() && j.contains("metadata") && j["metadata"].is_object() &&
          j["metadata"].contains("name") && j.contains("kind")) {
        names.push_back(j["kind"].dump() + " " + j["metadata"]["name"].dump());
      }
      for (const api::SchemaError& e : ManifestSchema().Validate(j)) {
        errors.push_back((docs.size() > 1 ? "document " + std::to_string(n) + ": " : "") +
                         e.Text());
      }
    }
    if (n == 0) errors.push_back("no manifest in the file (kind Function or FLJob)");
  }
  // shoald's own parser, which POST /v1/functions runs: what the schema cannot say (files on
  // this host, scale.max >= scale.min, durations > 0, the autoscaler's ranges).
  if (against != ValidateAgainst::kSchema && errors.empty()) {
    auto parsed = ParseManifests(text, NodeConfig{});
    if (!parsed.ok()) errors.push_back(parsed.status().message());
  }
  for (const std::string& e : errors) std::fprintf(stderr, "%s: %s\n", file.c_str(), e.c_str());
  if (!errors.empty()) return 1;
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  std::erase(list, '"');
  std::printf("%s: valid (%s)\n", file.c_str(), list.c_str());
  return 0;
}

}  // namespace

int Validate(const std::vector<std::string>& files, ValidateAgainst against) {
  int rc = 0;
  for (const std::string& f : files) rc = std::max(rc, ValidateFile(f, against));
  return rc;
}

int Explain(const std::string& path) {
  auto text = ManifestSchema().Explain(path);
  if (!text.ok()) {
    std::fprintf(stderr, "shoal explain: %s\n", text.status().message().c_str());
    return 1;
  }
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace shoal::cli
