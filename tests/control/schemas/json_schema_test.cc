// JsonSchema: each keyword of its subset refusing what it should with the field's path and what
// is accepted, a schema outside the subset refused when it is loaded, and explain's output.
#include "shoal/control/schemas/json_schema.h"

#include <gtest/gtest.h>

#include "shoal/control/schemas/schemas.h"

namespace shoal::api {
namespace {

std::vector<std::string> Errors(const Json& schema, const Json& doc) {
  auto checker = JsonSchema::Make(&schema);
  EXPECT_TRUE(checker.ok()) << checker.status().message();
  std::vector<std::string> out;
  for (const SchemaError& e : checker->Validate(doc)) out.push_back(e.Text());
  return out;
}

TEST(JsonSchemaTest, AKeywordOutsideTheSubsetIsRefusedWhenLoaded) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {"a": {"format": "uri"}}})");
  auto checker = JsonSchema::Make(&schema);
  ASSERT_FALSE(checker.ok());
  EXPECT_EQ(checker.status().message(),
            "#/properties/a: keyword 'format' is outside what shoal checks");
}

TEST(JsonSchemaTest, EachKeywordNamesTheFieldAndWhatIsAccepted) {
  const Json schema = Json::parse(R"({
    "type": "object", "required": ["n"], "additionalProperties": false,
    "properties": {
      "n": {"type": "integer", "minimum": 1, "maximum": 8},
      "e": {"enum": ["a", "b"]},
      "s": {"type": "string", "pattern": "^[a-z]+$"},
      "d": {"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                      {"type": "string", "pattern": "^[0-9]+s$"}]},
      "l": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": true}
    }})");
  EXPECT_TRUE(Errors(schema, Json::parse(R"({"n": 3, "e": "a", "s": "x", "d": "5s", "l": ["p"]})"))
                  .empty());
  EXPECT_EQ(Errors(schema, Json::parse(R"({"e": "c"})")),
            (std::vector<std::string>{"n: required", "e: must be one of: a, b; got \"c\""}));
  EXPECT_EQ(Errors(schema, Json::parse(R"({"n": 9, "x": 1})")),
            (std::vector<std::string>{"n: must be integer from 1 to 8, got 9",
                                      "x: unknown field (known: n, e, s, d, l)"}));
  EXPECT_EQ(Errors(schema, Json::parse(R"({"n": 1.5, "s": "A"})")),
            (std::vector<std::string>{"n: must be integer from 1 to 8, got number 1.5",
                                      "s: must be string matching ^[a-z]+$, got \"A\""}));
  EXPECT_EQ(Errors(schema, Json::parse(R"({"n": 1, "d": "soon", "l": ["p", "", "p"]})")),
            (std::vector<std::string>{
                "d: must be number > 0; or string matching ^[0-9]+s$; got \"soon\"",
                "l[1]: must be string, not empty, got \"\"", "l[2]: duplicate of l[0]"}));
}

TEST(JsonSchemaTest, TheManifestSchemaLoadsAndChecksADocument) {
  const Json schema = Json::parse(ManifestSchemaJson());
  auto checker = JsonSchema::Make(&schema);
  ASSERT_TRUE(checker.ok()) << checker.status().message();
  const Json job = Json::parse(R"({"apiVersion": "shoal.dev/v1", "kind": "FLJob",
      "metadata": {"name": "j"}, "spec": {"clients": {"expected": 2},
      "aggregation": {"robust": {"rule": "krum", "rank": 2}}}})");
  std::vector<std::string> errors;
  for (const SchemaError& e : checker->Validate(job)) errors.push_back(e.Text());
  EXPECT_EQ(errors, (std::vector<std::string>{
                        "spec.aggregation.robust.rank: is a parameter of rule \"flag\", not "
                        "\"krum\""}));
}

TEST(JsonSchemaTest, ExplainWalksKindsAndFields) {
  const Json schema = Json::parse(ManifestSchemaJson());
  auto checker = JsonSchema::Make(&schema);
  ASSERT_TRUE(checker.ok());
  auto text = checker->Explain("FLJob.spec.training.batchSize");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text,
            "KIND:     FLJob\nFIELD:    spec.training.batchSize <integer>\n\nDESCRIPTION:\n"
            "  sent to clients in the task\n\nACCEPTS:\n  integer from 1 to 65536\n\n"
            "DEFAULT:  32\n");
  auto unknown = checker->Explain("function.spec.replicas");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "field 'replicas' does not exist in function.spec (fields: handler, concurrency, "
            "scale, timeout, keepAlive, maxBodySize, resources, autoscaling, inference, auth, "
            "security)");
}

}  // namespace
}  // namespace shoal::api
