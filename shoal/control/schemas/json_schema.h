// A JSON Schema (draft 2020-12) checker for the subset api/manifest.schema.json is written in,
// and `kubectl explain` for its fields: what `shoal validate` and `shoal explain` run, reading
// the schema compiled in (schemas.h). Keywords: $ref (local), type, enum, const, properties,
// required, additionalProperties, propertyNames, minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, minLength, maxLength, pattern, items, uniqueItems, minProperties,
// maxProperties, allOf, anyOf, oneOf, not, if/then/else. An unknown keyword is refused when the
// checker is built (a schema edit the checker would silently skip must fail its test).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::api {

using Json = nlohmann::ordered_json;  // the schema's keys keep their order (explain, messages)

struct SchemaError {
  std::string path;     // the field as the manifest parser names it: spec.clients.tokens[0]
  std::string message;  // what is wrong and what would be accepted
  std::string Text() const { return path.empty() ? message : path + ": " + message; }
};

class JsonSchema {
 public:
  // `root` must outlive the checker. kInvalidArgument naming a keyword outside the subset.
  static Result<JsonSchema> Make(const Json* root);

  // Every error `instance` has, in document order; none when it is valid.
  std::vector<SchemaError> Validate(const Json& instance) const;

  // The field at `path` ("fljob.spec.aggregation": a kind of $defs, case-insensitive, then
  // property names) as `kubectl explain` shows one: kind, field and type, description, allowed
  // values, range, default, and an object's fields one a line. kNotFound naming the known
  // kinds or the fields of the last object reached.
  Result<std::string> Explain(const std::string& path) const;

 private:
  explicit JsonSchema(const Json* root) : root_(root) {}
  const Json& Resolve(const Json& s) const;
  void Check(const Json& s, const Json& v, const std::string& path,
             std::vector<SchemaError>& out) const;
  bool Matches(const Json& s, const Json& v) const;
  // What `s` accepts in a few words: "integer from 1 to 63", "one of: auto, cpu, gpu", ...
  std::string Accepts(const Json& s) const;

  const Json* root_;
};

}  // namespace shoal::api
