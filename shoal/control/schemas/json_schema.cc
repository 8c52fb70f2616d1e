#include "shoal/control/schemas/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>
#include <sstream>

namespace shoal::api {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kKeywords[] = {"$schema",
                                     "$id",
                                     "$defs",
                                     "$ref",
                                     "title",
                                     "description",
                                     "default",
                                     "examples",
                                     "type",
                                     "enum",
                                     "const",
                                     "properties",
                                     "required",
                                     "additionalProperties",
                                     "propertyNames",
                                     "minimum",
                                     "maximum",
                                     "exclusiveMinimum",
                                     "exclusiveMaximum",
                                     "minLength",
                                     "maxLength",
                                     "pattern",
                                     "items",
                                     "uniqueItems",
                                     "minProperties",
                                     "maxProperties",
                                     "allOf",
                                     "anyOf",
                                     "oneOf",
                                     "not",
                                     "if",
                                     "then",
                                     "else"};

Status CheckKeywords(const json& s, const std::string& where) {
  if (s.is_boolean()) return Status::Ok();
  if (!s.is_object()) return InvalidArgument(where + ": a schema must be an object or a boolean");
  for (const auto& [k, v] : s.items()) {
    if (std::find(std::begin(kKeywords), std::end(kKeywords), k) == std::end(kKeywords)) {
      return InvalidArgument(where + ": keyword '" + k + "' is outside what shoal checks");
    }
    if (k == "properties" || k == "$defs") {
      for (const auto& [name, sub] : v.items()) {
        if (Status st = CheckKeywords(sub, where + "/" + k + "/" + name); !st.ok()) return st;
      }
    } else if (k == "allOf" || k == "anyOf" || k == "oneOf") {
      for (size_t i = 0; i < v.size(); ++i) {
        if (Status st = CheckKeywords(v[i], where + "/" + k + "/" + std::to_string(i)); !st.ok())
          return st;
      }
    } else if (k == "additionalProperties" || k == "propertyNames" || k == "items" || k == "not" ||
               k == "if" || k == "then" || k == "else") {
      if (Status st = CheckKeywords(v, where + "/" + k); !st.ok()) return st;
    }
  }
  return Status::Ok();
}

std::string TypeOf(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return std::floor(v.get<double>()) == v.get<double>() ? "integer" : "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool IsType(const json& v, const std::string& type) {
  const std::string t = TypeOf(v);
  return t == type || (type == "number" && t == "integer");
}

std::string Show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string Number(double d) {
  std::ostringstream o;
  o << d;
  return o.str();
}

}  // namespace

Result<JsonSchema> JsonSchema::Make(const json* root) {
  if (Status st = CheckKeywords(*root, "#"); !st.ok()) return st;
  return JsonSchema(root);
}

const json& JsonSchema::Resolve(const json& s) const {
  const json* p = &s;
  while (p->is_object() && p->contains("$ref")) {
    const std::string ref = (*p)["$ref"].get<std::string>();
    p = &root_->at(json::json_pointer(ref.substr(1)));  // "#/$defs/X" -> "/$defs/X"
  }
  return *p;
}

bool JsonSchema::Matches(const json& s, const json& v) const {
  std::vector<SchemaError> errors;
  Check(s, v, "", errors);
  return errors.empty();
}

std::string JsonSchema::Accepts(const json& raw) const {
  const json& s = Resolve(raw);
  if (s.is_boolean()) return s.get<bool>() ? "anything" : "nothing";
  if (s.contains("const")) return Show(s["const"]);
  if (s.contains("enum")) {
    std::string list;
    for (const json& e : s["enum"]) {
      list += (list.empty() ? "" : ", ") + (e.is_string() ? e.get<std::string>() : Show(e));
    }
    return "one of: " + list;
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    std::string list;
    for (const json& alt : s[k]) list += (list.empty() ? "" : "; or ") + Accepts(alt);
    return list;
  }
  std::string out;
  if (s.contains("type")) {
    if (s["type"].is_array()) {
      for (const json& t : s["type"]) out += (out.empty() ? "" : " or ") + t.get<std::string>();
    } else {
      out = s["type"].get<std::string>();
    }
  }
  const bool lo = s.contains("minimum"), hi = s.contains("maximum");
  if (lo && hi) {
    out +=
        " from " + Number(s["minimum"].get<double>()) + " to " + Number(s["maximum"].get<double>());
  } else if (lo) {
    out += " >= " + Number(s["minimum"].get<double>());
  } else if (hi) {
    out += " <= " + Number(s["maximum"].get<double>());
  }
  if (s.contains("exclusiveMinimum")) out += " > " + Number(s["exclusiveMinimum"].get<double>());
  if (s.contains("exclusiveMaximum")) out += " < " + Number(s["exclusiveMaximum"].get<double>());
  if (s.contains("pattern")) out += " matching " + s["pattern"].get<std::string>();
  if (s.contains("minLength") && s["minLength"].get<int>() > 0) out += ", not empty";
  if (s.contains("properties") && s.value("additionalProperties", json(true)) == json(false)) {
    std::string keys;
    for (const auto& [k, v] : s["properties"].items()) keys += (keys.empty() ? "" : ", ") + k;
    out += " with fields " + keys;
  }
  return out.empty() ? "anything" : out;
}

void JsonSchema::Check(const json& raw, const json& v, const std::string& path,
                       std::vector<SchemaError>& out) const {
  const json& s = Resolve(raw);
  if (s.is_boolean()) {
    if (!s.get<bool>()) out.push_back({path, "not allowed"});
    return;
  }
  auto fail = [&](const std::string& what) { out.push_back({path, what}); };
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array()) {
      for (const json& t : s["type"]) ok = ok || IsType(v, t.get<std::string>());
    } else {
      ok = IsType(v, s["type"].get<std::string>());
    }
    if (!ok) return fail("must be " + Accepts(s) + ", got " + TypeOf(v) + " " + Show(v));
  }
  if (s.contains("const") && s["const"] != v) {
    return fail("must be " + Show(s["const"]) + ", got " + Show(v));
  }
  if (s.contains("enum")) {
    const json& e = s["enum"];
    if (std::find(e.begin(), e.end(), v) == e.end()) {
      return fail("must be " + Accepts(s) + "; got " + Show(v));
    }
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    const bool below = (s.contains("minimum") && d < s["minimum"].get<double>()) ||
                       (s.contains("exclusiveMinimum") && d <= s["exclusiveMinimum"].get<double>());
    const bool above = (s.contains("maximum") && d > s["maximum"].get<double>()) ||
                       (s.contains("exclusiveMaximum") && d >= s["exclusiveMaximum"].get<double>());
    if (below || above) return fail("must be " + Accepts(s) + ", got " + Show(v));
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    // JSON Schema counts code points; the patterns and limits here are ASCII.
    if ((s.contains("minLength") && str.size() < s["minLength"].get<size_t>()) ||
        (s.contains("maxLength") && str.size() > s["maxLength"].get<size_t>()) ||
        (s.contains("pattern") &&
         !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))) {
      return fail("must be " + Accepts(s) + ", got " + Show(v));
    }
  }
  if (v.is_array()) {
    if (s.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        Check(s["items"], v[i], path + "[" + std::to_string(i) + "]", out);
      }
    }
    if (s.value("uniqueItems", false)) {
      for (size_t i = 0; i < v.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (v[i] == v[j]) {
            out.push_back({path + "[" + std::to_string(i) + "]",
                           "duplicate of " + path + "[" + std::to_string(j) + "]"});
          }
        }
      }
    }
  }
  if (v.is_object()) {
    if (s.contains("required")) {
      for (const json& k : s["required"]) {
        if (!v.contains(k.get<std::string>())) {
          out.push_back({Join(path, k.get<std::string>()), "required"});
        }
      }
    }
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    for (const auto& [k, item] : v.items()) {
      const std::string p = Join(path, k);
      if (s.contains("propertyNames") && !Matches(s["propertyNames"], json(k))) {
        out.push_back({p, "field name must be " + Accepts(s["propertyNames"])});
        continue;
      }
      if (props != nullptr && props->contains(k)) {
        Check((*props)[k], item, p, out);
      } else if (s.contains("additionalProperties")) {
        const json& extra = s["additionalProperties"];
        if (extra == json(false)) {
          std::string known;
          if (props != nullptr) {
            for (const auto& [name, unused] : props->items()) {
              known += (known.empty() ? "" : ", ") + name;
            }
          }
          out.push_back({p, "unknown field (known: " + known + ")"});
        } else {
          Check(extra, item, p, out);
        }
      }
    }
    if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) {
      fail("must have at least " + std::to_string(s["minProperties"].get<size_t>()) +
           " field(s): " + Accepts(s));
    }
    if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) {
      fail("must have at most " + std::to_string(s["maxProperties"].get<size_t>()) +
           " field(s): " + Accepts(s));
    }
  }
  if (s.contains("allOf")) {
    for (const json& sub : s["allOf"]) Check(sub, v, path, out);
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    size_t matching = 0;
    const json* closest = nullptr;
    for (const json& alt : s[k]) {
      if (Matches(alt, v)) {
        ++matching;
        continue;
      }
      // The alternative of the value's own type (and, for objects, whose required fields it
      // has) says best what is wrong inside it.
      const json& a = Resolve(alt);
      if (a.is_object() && a.contains("type") && a["type"].is_string() &&
          IsType(v, a["type"].get<std::string>())) {
        bool has_required = true;
        if (v.is_object() && a.contains("required")) {
          for (const json& r : a["required"]) {
            has_required = has_required && v.contains(r.get<std::string>());
          }
        }
        if (has_required && closest == nullptr) closest = &alt;
      }
    }
    if (matching == 0) {
      if (closest != nullptr && v.is_object()) {
        Check(*closest, v, path, out);
      } else {
        fail("must be " + Accepts(s) + "; got " + Show(v));
      }
    } else if (matching > 1 && std::string(k) == "oneOf") {
      fail("matches more than one of: " + Accepts(s));
    }
  }
  if (s.contains("not") && Matches(s["not"], v)) {
    const json& n = Resolve(s["not"]);
    if (n.is_object() && n.contains("required") && n["required"].size() == 1) {
      out.push_back({Join(path, n["required"][0].get<std::string>()), "not allowed here"});
    } else {
      fail("must not be " + Accepts(s["not"]));
    }
  }
  if (s.contains("if")) {
    const bool cond = Matches(s["if"], v);
    if (cond && s.contains("then")) Check(s["then"], v, path, out);
    if (!cond && s.contains("else")) {
      // A rule's parameter given with another rule: name the rule the parameter belongs to.
      const json& e = Resolve(s["else"]);
      const json& cond_schema = Resolve(s["if"]);
      if (e.is_object() && e.contains("not") && Matches(e["not"], v) &&
          Resolve(e["not"]).contains("required") && cond_schema.contains("properties") &&
          cond_schema["properties"].size() == 1) {
        const auto first = cond_schema["properties"].begin();
        const std::string& key = first.key();
        const json& c = first.value();
        const json& field = Resolve(e["not"])["required"][0];
        out.push_back({Join(path, field.get<std::string>()),
                       "is a parameter of " + key + " " + Show(c.value("const", json())) +
                           ", not " + Show(v.value(key, json("none")))});
      } else {
        Check(s["else"], v, path, out);
      }
    }
  }
}

std::vector<SchemaError> JsonSchema::Validate(const json& instance) const {
  std::vector<SchemaError> found;
  Check(*root_, instance, "", found);
  // One fault can fail two keywords (apiVersion: the document's and its kind's); say it once.
  std::vector<SchemaError> out;
  for (SchemaError& e : found) {
    if (std::none_of(out.begin(), out.end(), [&](const SchemaError& o) {
          return o.path == e.path && o.message == e.message;
        })) {
      out.push_back(std::move(e));
    }
  }
  return out;
}

Result<std::string> JsonSchema::Explain(const std::string& path) const {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  const json& defs = root_->at("$defs");
  std::string kinds;
  const json* node = nullptr;
  std::string kind;
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  for (const auto& [k, v] : defs.items()) {
    kinds += (kinds.empty() ? "" : ", ") + lower(k);
    if (!parts.empty() && lower(parts[0]) == lower(k)) {
      node = &v;
      kind = k;
    }
  }
  if (node == nullptr) {
    return NotFound("'" + (parts.empty() ? std::string() : parts[0]) +
                    "': not a kind (one of: " + kinds + ")");
  }
  std::string field;
  for (size_t i = 1; i < parts.size(); ++i) {
    const json* s = &Resolve(*node);
    // A field that is an object among alternatives (handler: a name or an object) walks into
    // the first object alternative that has the next name.
    if (!s->contains("properties")) {
      for (const char* k : {"anyOf", "oneOf"}) {
        if (!s->contains(k)) continue;
        for (const json& alt : (*s)[k]) {
          const json& a = Resolve(alt);
          if (a.contains("properties") && a["properties"].contains(parts[i])) s = &a;
        }
      }
    }
    if (!s->contains("properties") || !(*s)["properties"].contains(parts[i])) {
      std::string known;
      if (s->contains("properties")) {
        for (const auto& [k, unused] : (*s)["properties"].items()) {
          known += (known.empty() ? "" : ", ") + k;
        }
      }
      return NotFound(
          "field '" + parts[i] + "' does not exist in " +
          (field.empty() ? lower(kind) : lower(kind) + "." + field) +
          (known.empty() ? std::string(" (it has no fields)") : " (fields: " + known + ")"));
    }
    node = &(*s)["properties"][parts[i]];
    field = field.empty() ? parts[i] : field + "." + parts[i];
  }
  const json& s = Resolve(*node);
  auto type_of = [&](const json& f) {
    const json& r = Resolve(f);
    if (r.contains("type") && r["type"].is_string()) return r["type"].get<std::string>();
    if (r.contains("enum") || r.contains("const")) return std::string("string");
    std::string types;
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!r.contains(k)) continue;
      std::set<std::string> seen;
      for (const json& alt : r[k]) {
        const json& a = Resolve(alt);
        std::string t = a.contains("type") && a["type"].is_string()
                            ? a["type"].get<std::string>()
                            : (a.contains("const") ? std::string("string") : std::string("any"));
        if (seen.insert(t).second) types += (types.empty() ? "" : " | ") + t;
      }
    }
    return types.empty() ? std::string("any") : types;
  };
  std::ostringstream o;
  o << "KIND:     " << kind << "\n";
  o << "FIELD:    " << (field.empty() ? "(the manifest)" : field) << " <" << type_of(s) << ">\n";
  if (s.contains("description")) {
    o << "\nDESCRIPTION:\n  " << s["description"].get<std::string>() << "\n";
  }
  if (!s.contains("properties")) o << "\nACCEPTS:\n  " << Accepts(s) << "\n";
  if (s.contains("default")) {
    const json& d = s["default"];
    o << "\nDEFAULT:  " << (d.is_string() ? d.get<std::string>() : Show(d)) << "\n";
  }
  if (s.contains("properties")) {
    std::set<std::string> required;
    if (s.contains("required")) {
      for (const json& r : s["required"]) required.insert(r.get<std::string>());
    }
    o << "\nFIELDS:\n";
    for (const auto& [k, f] : s["properties"].items()) {
      const json& r = Resolve(f);
      o << "  " << k << " <" << type_of(r) << ">" << (required.count(k) ? " (required)" : "");
      if (r.contains("default")) {
        const json& d = r["default"];
        o << " (default " << (d.is_string() ? d.get<std::string>() : Show(d)) << ")";
      }
      o << "\n";
      if (r.contains("description")) o << "    " << r["description"].get<std::string>() << "\n";
      if (!r.contains("properties")) o << "    accepts: " << Accepts(r) << "\n";
    }
  }
  return o.str();
}

}  // namespace shoal::api
