#include "shoal/control/node/manifest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "manifest_refusals.h"
#include "shoal/control/autoscaler/function_autoscaler.h"

namespace shoal {
namespace {

NodeConfig Defaults() {
  NodeConfig c;
  c.default_concurrency = 3;
  c.default_max_scale = 5;
  c.default_timeout_s = 12;
  c.default_keep_alive_s = 34;
  c.max_body_bytes = 100ull << 20;
  c.handler_dirs = {SHOAL_HANDLER_DIR};
  return c;
}

// Parses `yaml` expecting failure; returns the message.
std::string ErrorOf(const std::string& yaml) {
  return RefusalOf(ParseFunctionManifests(yaml, Defaults()), yaml);
}

const char* kFull = R"(apiVersion: shoal.dev/v1
kind: Function
metadata:
  name: echo-2
  namespace: team-a
  labels: {app: demo, tier: "1"}
spec:
  handler:
    builtin: echo
    env: {GREETING: hello, N: "3"}
  concurrency: 4
  scale: {min: 1, max: 6}
  timeout: 250ms
  keepAlive: 2m
  maxBodySize: 64Mi
  resources: {cpu: 500m, memory: 256Mi, gpu: 1}
)";

// A minimal manifest with `spec_extra` appended to spec (indented two spaces).
std::string Minimal(const std::string& spec_extra = "", const std::string& name = "fn") {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
         "\nspec:\n  handler:\n    builtin: echo\n" + spec_extra;
}

// The one function `yaml` declares; a failure (and an empty spec) when it is refused or
// declares another number of them.
FunctionSpec Parsed(const std::string& yaml) {
  auto r = ParseFunctionManifests(yaml, Defaults());
  EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << yaml;
  if (!r.ok()) return {};
  EXPECT_EQ(r->size(), 1u) << yaml;
  return r->empty() ? FunctionSpec{} : r->front();
}

// The fields a manifest may leave to the node's defaults, as one line to compare whole.
std::string Sizing(const FunctionSpec& s) {
  std::ostringstream o;
  o << std::setprecision(17) << "concurrency " << s.concurrency << ", scale " << s.min_scale << "-"
    << s.max_scale << ", timeout " << s.timeout_s << " s, keepAlive " << s.keep_alive_s
    << " s, maxBodySize " << s.max_body_bytes;
  return o.str();
}

TEST(ManifestTest, EveryFieldOfAGoodManifest) {
  const FunctionSpec s = Parsed(kFull);
  EXPECT_EQ(s.name, "echo-2");
  EXPECT_EQ(s.tenant, "team-a");
  EXPECT_EQ(s.labels, (std::map<std::string, std::string>{{"app", "demo"}, {"tier", "1"}}));
  EXPECT_EQ(s.handler.builtin, "echo");
  EXPECT_EQ(s.handler.library, "");
  EXPECT_EQ(s.handler.env, (std::map<std::string, std::string>{{"GREETING", "hello"}, {"N", "3"}}));
  EXPECT_EQ(Sizing(s),
            "concurrency 4, scale 1-6, timeout 0.25 s, keepAlive 120 s, maxBodySize 67108864");
  EXPECT_DOUBLE_EQ(s.cpu, 0.5);
  EXPECT_EQ(s.memory_bytes, 256ull << 20);
  EXPECT_EQ(s.gpu, 1u);
  EXPECT_EQ(s.id, 0u);
  EXPECT_EQ(s.generation, 0u);
  EXPECT_EQ(s.manifest, kFull);
}

TEST(ManifestTest, DefaultsComeFromTheNodeConfig) {
  const FunctionSpec s = Parsed(Minimal());
  EXPECT_EQ(s.tenant, "default");
  EXPECT_EQ(Sizing(s),
            "concurrency 3, scale 0-5, timeout 12 s, keepAlive 34 s, maxBodySize 104857600");
  EXPECT_EQ(s.handler.symbol, "shoal_handle");
  // Only min given, above the default max: max follows min.
  const FunctionSpec m = Parsed(Minimal("  scale: {min: 7}\n"));
  EXPECT_EQ(m.min_scale, 7u);
  EXPECT_EQ(m.max_scale, 7u);
}

TEST(ManifestTest, JsonIsAccepted) {
  const FunctionSpec s = Parsed(
      R"({"apiVersion": "shoal.dev/v1", "kind": "Function", "metadata": {"name": "j"},
          "spec": {"handler": {"builtin": "sha256"}, "concurrency": 2, "timeout": 5}})");
  EXPECT_EQ(s.name, "j");
  EXPECT_EQ(s.handler.builtin, "sha256");
  EXPECT_EQ(s.concurrency, 2u);
  EXPECT_DOUBLE_EQ(s.timeout_s, 5);
}

TEST(ManifestTest, MultipleDocumentsKeepTheirOwnText) {
  const std::string a = Minimal("", "a");
  const std::string b = Minimal("  concurrency: 9\n", "b");
  auto r = ParseFunctionManifests("# leading comment\n---\n" + a + "---\n" + b + "---\n# empty\n",
                                  Defaults());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "a");
  EXPECT_EQ((*r)[0].manifest, a);
  EXPECT_EQ((*r)[1].name, "b");
  EXPECT_EQ((*r)[1].manifest, b);
  EXPECT_EQ((*r)[1].concurrency, 9u);
}

TEST(ManifestTest, LibraryHandler) {
  const std::string lib = SHOAL_HANDLER_DIR "/libshoal-reverse.so";
  const FunctionSpec s = Parsed(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: lib}\nspec:\n  handler:\n"
      "    library: " +
      lib + "\n    symbol: my_entry\n");
  EXPECT_EQ(s.handler.library, lib);
  EXPECT_EQ(s.handler.symbol, "my_entry");
  EXPECT_EQ(s.handler.builtin, "");
}

TEST(ManifestTest, ErrorsNameTheFieldAndTheLine) {
  // Lines: 1 apiVersion, 2 kind, 3 metadata, 4 name, 5 spec, 6 handler, 7 builtin, 8+ extra.
  ExpectErrors(
      ErrorOf,
      {
          {Minimal("  scale: {min: 2, max: 1}\n"),
           "spec.scale.max: must be >= spec.scale.min (2 > 1) (line 8)"},
          {Minimal("  scal: {min: 2}\n"), "spec.scal: unknown field (line 8)"},
          {Minimal("  concurrency: 0\n"),
           "spec.concurrency: must be between 1 and 1024, got 0 (line 8)"},
          {Minimal("  concurrency: 2000\n"),
           "spec.concurrency: must be between 1 and 1024, got 2000 (line 8)"},
          {Minimal("  concurrency: many\n"),
           "spec.concurrency: must be an integer, got \"many\" (line 8)"},
          {Minimal("  scale:\n    max: 64\n"),
           "spec.scale.max: must be between 1 and 63, got 64 (line 9)"},
          {Minimal("  scale:\n    max: 0\n"),
           "spec.scale.max: must be between 1 and 63, got 0 (line 9)"},
          {Minimal("  scale:\n    min: -1\n"),
           "spec.scale.min: must be between 0 and 63, got -1 (line 9)"},
          {Minimal("  scale: 3\n"), "spec.scale: must be a mapping (line 8)"},
          {Minimal("  timeout: soon\n"),
           "spec.timeout: must be a duration like 250ms, 30s, 2m or 1h, got \"soon\" (line 8)"},
          {Minimal("  timeout: 0s\n"), "spec.timeout: must be > 0, got 0s (line 8)"},
          {Minimal("  keepAlive: 5d\n"),
           "spec.keepAlive: must be a duration like 250ms, 30s, 2m or 1h, got \"5d\" (line 8)"},
          {Minimal("  maxBodySize: 1Ti\n"),
           "spec.maxBodySize: must be <= the node's max_body_bytes (104857600), got "
           "1099511627776 (line 8)"},
          {Minimal("  maxBodySize: 0\n"), "spec.maxBodySize: must be > 0 (line 8)"},
          {Minimal("  maxBodySize: 12Qi\n"),
           "spec.maxBodySize: must be a quantity like 1048576, 64Ki or 1Gi, got \"12Qi\" "
           "(line 8)"},
          {Minimal("  resources: {cpu: lots}\n"),
           "spec.resources.cpu: must be cores (0.5) or millicores (500m), got \"lots\" (line 8)"},
          {Minimal("  resources: {disk: 1Gi}\n"), "spec.resources.disk: unknown field (line 8)"},
          {Minimal("  resources:\n    gpu: -1\n"),
           "spec.resources.gpu: must be between 0 and 64, got -1 (line 9)"},
          {Minimal("  concurrency: 2\n  concurrency: 3\n"),
           "spec.concurrency: duplicate field (line 9)"},
      });
}

TEST(ManifestTest, AutoscalingBlock) {
  const FunctionSpec s =
      Parsed(Minimal("  keepAlive: 20s\n"
                     "  autoscaling:\n"
                     "    policy: kpa\n"
                     "    target: 10\n"
                     "    minScale: 0\n"
                     "    maxScale: 8\n"
                     "    keepAlive: histogram\n"
                     "    params: {stableWindow: 60s, panicWindow: 6s, scaleToZeroGrace: 30s,\n"
                     "             panicThreshold: 300, minSamples: 3}\n"));
  EXPECT_EQ(s.autoscaling.policy, "kpa");
  EXPECT_DOUBLE_EQ(s.autoscaling.target, 10);
  EXPECT_EQ(s.autoscaling.keep_alive, "histogram");
  EXPECT_EQ(s.min_scale, 0u);
  EXPECT_EQ(s.max_scale, 8u);
  EXPECT_DOUBLE_EQ(s.keep_alive_s, 20);
  EXPECT_DOUBLE_EQ(s.autoscaling.params.at("stableWindow"), 60);
  EXPECT_DOUBLE_EQ(s.autoscaling.params.at("panicWindow"), 6);
  EXPECT_DOUBLE_EQ(s.autoscaling.params.at("scaleToZeroGrace"), 30);
  EXPECT_DOUBLE_EQ(s.autoscaling.params.at("panicThreshold"), 300);

  // No block: the reactive scaler with spec.scale / spec.keepAlive as before; a block without
  // a policy gets the default one.
  const FunctionSpec plain = Parsed(Minimal("  scale: {min: 1, max: 4}\n"));
  EXPECT_EQ(plain.autoscaling.policy, "none");
  EXPECT_EQ(plain.min_scale, 1u);
  const FunctionSpec dflt = Parsed(Minimal("  scale: {max: 4}\n  autoscaling: {maxScale: 4}\n"));
  EXPECT_EQ(dflt.autoscaling.policy, kDefaultAutoscalingPolicy);
  EXPECT_EQ(dflt.max_scale, 4u);
}

TEST(ManifestTest, LearnedPolicyNamesItsFileAndWeights) {
  const FunctionSpec s =
      Parsed(Minimal("  autoscaling:\n    policy: learned\n"
                     "    policyFile: /etc/shoal/policies/learned-v1.json\n"
                     "    params: {costWeight: 0.01, learnOnline: 1}\n"));
  EXPECT_EQ(s.autoscaling.policy, "learned");
  EXPECT_EQ(s.autoscaling.metric, "concurrency");
  EXPECT_EQ(s.autoscaling.policy_file, "/etc/shoal/policies/learned-v1.json");
  const FunctionSpec tokens = Parsed(Minimal(
      "  autoscaling:\n    policy: learned\n    metric: tokensInFlight\n    target: 256\n"));
  EXPECT_EQ(tokens.autoscaling.metric, "tokensInFlight");
  EXPECT_DOUBLE_EQ(tokens.autoscaling.target, 256);
  EXPECT_DOUBLE_EQ(s.autoscaling.params.at("costWeight"), 0.01);
  EXPECT_EQ(ErrorOf(Minimal("  autoscaling:\n    policy: kpa\n    policyFile: x.json\n")),
            "spec.autoscaling.policyFile: only with policy learned (policy is kpa) (line 10)");
}

TEST(ManifestTest, AutoscalingErrorsNameTheFieldAndTheLine) {
  // Lines: 1 apiVersion .. 7 builtin, 8 autoscaling, 9+ its fields.
  ExpectErrors(
      ErrorOf,
      {
          {Minimal("  autoscaling:\n    policy: hpa\n"),
           "spec.autoscaling.policy: unknown policy \"hpa\" (one of: none, kpa, rl-q, shoal, "
           "learned) "
           "(line 9)"},
          {Minimal("  autoscaling:\n    policy: kpa\n    target: 0\n"),
           "spec.autoscaling.target: must be > 0, got 0 (line 10)"},
          {Minimal("  autoscaling:\n    keepAlive: 30s\n"),
           "spec.autoscaling.keepAlive: must be fixed or histogram (the fixed window itself is "
           "spec.keepAlive), got \"30s\" (line 9)"},
          {Minimal("  autoscaling:\n    minScale: 3\n    maxScale: 2\n"),
           "spec.autoscaling.maxScale: must be >= the minimum scale (3 > 2) (line 10)"},
          {Minimal("  scale: {min: 1}\n  autoscaling:\n    minScale: 2\n"),
           "spec.autoscaling.minScale: disagrees with spec.scale.min (2 vs 1); give one of them "
           "(line 10)"},
          {Minimal("  autoscaling:\n    metric: rps\n"),
           "spec.autoscaling.metric: unknown metric \"rps\" (one of: concurrency, "
           "tokensInFlight) (line 9)"},
          {Minimal("  autoscaling:\n    policy: kpa\n    metric: tokensInFlight\n"),
           "spec.autoscaling.target: metric tokensInFlight needs a target (tokens per instance) "
           "(line 10)"},
          {Minimal("  autoscaling:\n    policy: rl-q\n    metric: tokensInFlight\n"
                   "    target: 256\n"),
           "spec.autoscaling.metric: tokensInFlight needs policy kpa, shoal or learned (policy "
           "is rl-q) (line 10)"},
      });
  EXPECT_EQ(ErrorOf(Minimal("  autoscaling:\n    policy: kpa\n    params:\n      stable: 6s\n"))
                .substr(0, 56),
            "spec.autoscaling.params.stable: unknown parameter (known");
  ExpectErrors(
      ErrorOf,
      {
          {Minimal("  autoscaling:\n    policy: kpa\n    params:\n      stableWindow: x\n"),
           "spec.autoscaling.params.stableWindow: must be a duration like 250ms, 30s, 2m or 1h, "
           "got \"x\" (line 11)"},
          {Minimal("  autoscaling:\n    policy: kpa\n    params:\n"
                   "      stableWindow: 10s\n      panicWindow: 20s\n"),
           "spec.autoscaling.params.panicWindow: must be <= the stable window (10 s), got 20 s "
           "(line 12)"},
          {Minimal("  autoscaling:\n    policy: kpa\n    params:\n"
                   "      scaleDownDelay: 10s\n"),
           "spec.autoscaling.params.scaleDownDelay: not a parameter of policy kpa (it is for "
           "shoal learned) (line 11)"},
          {Minimal("  autoscaling:\n    policy: shoal\n    params:\n"
                   "      minSamples: 2\n"),
           "spec.autoscaling.params.minSamples: only with keepAlive: histogram (line 11)"},
          {Minimal("  autoscaling:\n    policy: kpa\n    params:\n"
                   "      targetUtilization: 1.5\n"),
           "spec.autoscaling.params: kpa.target_utilization must be in (0, 1] (got 1.5) "
           "(line 11)"},
          {Minimal("  autoscaling:\n    policy: none\n    target: 3\n"),
           "spec.autoscaling.policy: none takes no target, params or histogram keep-alive "
           "(line 9)"},
      });
}

TEST(ManifestTest, HeaderAndMetadataErrors) {
  ExpectErrors(
      ErrorOf,
      {
          {"apiVersion: shoal.dev/v1\nkind: Fnction\nmetadata: {name: a}\n"
           "spec: {handler: {builtin: echo}}\n",
           "kind: expected Function, got Fnction (line 2)"},
          {"kind: Function\nmetadata: {name: a}\nspec: {handler: {builtin: echo}}\n",
           "apiVersion: expected shoal.dev/v1"},
          {"apiVersion: v2\nkind: Function\nmetadata: {name: a}\n"
           "spec: {handler: {builtin: echo}}\n",
           "apiVersion: expected shoal.dev/v1, got v2 (line 1)"},
          {"apiVersion: shoal.dev/v1\nmetadata: {name: a}\n"
           "spec: {handler: {builtin: echo}}\n",
           "kind: expected Function"},
          {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {labels: {a: b}}\n"
           "spec: {handler: {builtin: echo}}\n",
           "metadata.name: required"},
          {"apiVersion: shoal.dev/v1\nkind: Function\n"
           "spec: {handler: {builtin: echo}}\n",
           "metadata: required"},
          {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: a}\n", "spec: required"},
          {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: a}\nspec: {}\n",
           "spec.handler: required"},
          {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: Echo_1\n"
           "spec: {handler: {builtin: echo}}\n",
           "metadata.name: must be a DNS label (lower-case letters, digits and '-', starting "
           "and ending with a letter or digit, at most 63 characters), got \"Echo_1\" (line 4)"},
      });
  EXPECT_NE(ErrorOf(Minimal("", std::string(64, 'a'))).find("metadata.name: must be a DNS label"),
            std::string::npos);
  EXPECT_TRUE(ParseFunctionManifests(Minimal("", std::string(63, 'a')), Defaults()).ok());
  EXPECT_EQ(ErrorOf("apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: a\n"
                    "  namespace: -x\nspec: {handler: {builtin: echo}}\n")
                .substr(0, 48),
            "metadata.namespace: must be a DNS label (lower-c");
  ExpectErrors(ErrorOf,
               {
                   {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: a\n"
                    "  owner: me\nspec: {handler: {builtin: echo}}\n",
                    "metadata.owner: unknown field (line 5)"},
                   {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: a}\n"
                    "status: {}\nspec: {handler: {builtin: echo}}\n",
                    "status: unknown field (line 4)"},
                   {"- just\n- a list\n",
                    "document must be a mapping of apiVersion, kind, metadata, spec (line 1)"},
               });
}

TEST(ManifestTest, HandlerErrors) {
  const std::string head =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: h}\nspec:\n"
      "  handler:\n";
  ExpectErrors(
      ErrorOf,
      {
          {head + "    builtin: nonesuch\n",
           "spec.handler.builtin: unknown built-in handler \"nonesuch\" (one of: echo, sha256, "
           "wordcount, sleep, inference) (line 6)"},
          {head + "    builtin: echo\n    library: /bin/sh\n",
           "spec.handler: set exactly one of builtin or library (line 6)"},
          {head + "    env: {A: b}\n",
           "spec.handler: set exactly one of builtin or library (line 6)"},
          {head + "    library: libmine.so\n",
           "spec.handler.library: must be an absolute path, got \"libmine.so\" (line 6)"},
          {head + "    library: /nonexistent/libmine.so\n",
           "spec.handler.library: /nonexistent/libmine.so is outside the handler directories "
           "(allowed: " SHOAL_HANDLER_DIR ") (line 6)"},
          {head + "    library: " SHOAL_HANDLER_DIR "/nonesuch.so\n",
           "spec.handler.library: no such file on this node: " SHOAL_HANDLER_DIR
           "/nonesuch.so (line 6)"},
          {head + "    builtin: echo\n    symbol: f\n",
           "spec.handler.symbol: only applies to spec.handler.library (line 7)"},
          {head + "    library: " SHOAL_HANDLER_DIR "/libshoal-reverse.so\n"
                  "    symbol: 1x\n",
           "spec.handler.symbol: must be a C identifier, got \"1x\" (line 7)"},
          {head + "    builtin: echo\n    env:\n      BAD-NAME: x\n",
           "spec.handler.env.BAD-NAME: must be an environment variable name "
           "([A-Za-z_][A-Za-z0-9_]*) (line 8)"},
          {head + "    builtin: echo\n    env:\n      A: [1, 2]\n",
           "spec.handler.env.A: must be a string (line 8)"},
          {head + "    builtin: echo\n    runtime: go\n",
           "spec.handler.runtime: unknown field (line 7)"},
      });
}

TEST(ManifestTest, SyntaxErrorsAndDocumentLevelErrors) {
  const std::string e =
      ErrorOf("apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: [a\n");
  EXPECT_EQ(e.rfind("YAML syntax error: ", 0), 0u) << e;
  EXPECT_NE(e.find("(line "), std::string::npos) << e;
  // Lines count through the whole stream, not one document.
  ExpectErrors(ErrorOf,
               {
                   {Minimal("", "a") + "---\n" + Minimal("  scal: 1\n", "b"),
                    "spec.scal: unknown field (line 16)"},
                   {Minimal("", "twin") + "---\n" + Minimal("", "twin"),
                    "metadata.name: duplicate function \"twin\" in one deploy (lines 4 and 12)"},
                   {"", "no Function documents in the manifest"},
                   {"# only a comment\n---\n", "no Function documents in the manifest"},
               });
}

// Each {text, value}: `parse` accepts the text and reads the value; each of `refused`: it does not.
template <typename T>
void ExpectParses(bool (*parse)(std::string_view, T*),
                  std::initializer_list<std::pair<const char*, T>> accepted,
                  std::initializer_list<const char*> refused) {
  for (const auto& [text, want] : accepted) {
    T got{};
    EXPECT_TRUE(parse(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* text : refused) {
    T got{};
    EXPECT_FALSE(parse(text, &got)) << text;
  }
}

TEST(ManifestTest, ValueParsers) {
  ExpectParses<double>(ParseDuration,
                       {{"250ms", 0.25}, {"30s", 30}, {"2m", 120}, {"1h", 3600}, {"1.5", 1.5}},
                       {"s", "1x", "inf"});
  ExpectParses<uint64_t>(ParseQuantity,
                         {{"1024", 1024}, {"64Ki", 65536}, {"2M", 2000000}, {"1.5Gi", 1610612736}},
                         {"1.5", "-1", "1Qi"});
  ExpectParses<double>(ParseCpu, {{"500m", 0.5}, {"2", 2}}, {"2 cores"});
  EXPECT_TRUE(IsDnsLabel("a-1"));
  for (const char* bad : {"a-", "A", ""}) EXPECT_FALSE(IsDnsLabel(bad)) << bad;
}

TEST(ManifestTest, TheShippedExamplesParse) {
  struct Want {
    const char* file;
    const char* handler;
    uint32_t concurrency, min, max;
  };
  for (const Want& w : {Want{"echo.yaml", "echo", 8, 1, 4}, Want{"sha256.yaml", "sha256", 4, 0, 2},
                        Want{"wordcount.yaml", "wordcount", 4, 0, 2}}) {
    std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/deploy/examples/" + w.file);
    ASSERT_TRUE(in) << w.file;
    std::stringstream ss;
    ss << in.rdbuf();
    auto r = ParseFunctionManifests(ss.str(), NodeConfig{});
    ASSERT_TRUE(r.ok()) << w.file << ": " << r.status().message();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].name, w.handler);
    EXPECT_EQ((*r)[0].handler.builtin, w.handler);
    EXPECT_EQ((*r)[0].concurrency, w.concurrency) << w.file;
    EXPECT_EQ((*r)[0].min_scale, w.min) << w.file;
    EXPECT_EQ((*r)[0].max_scale, w.max) << w.file;
  }
}

TEST(ManifestTest, DurationsAreCappedAndTextMustBeUtf8) {
  EXPECT_EQ(ErrorOf(Minimal("  timeout: 169h\n")),
            "spec.timeout: must be at most 168h, got 169h (line 8)");
  EXPECT_EQ(ErrorOf(Minimal("  keepAlive: 10000000h\n")),
            "spec.keepAlive: must be at most 168h, got 10000000h (line 8)");
  EXPECT_TRUE(ParseFunctionManifests(Minimal("  keepAlive: 168h\n"), Defaults()).ok());
  // A Latin-1 byte in a comment: refused whole, before it could reach the registry.
  const std::string base = Minimal();
  const auto lines = std::count(base.begin(), base.end(), '\n');
  EXPECT_EQ(ErrorOf(base + "# caf\xe9\n"), "manifest: not valid UTF-8 (byte " +
                                               std::to_string(base.size() + 5) + ", line " +
                                               std::to_string(lines + 1) + ")");
  EXPECT_TRUE(ParseFunctionManifests(Minimal() + "# caf\xc3\xa9 \xe2\x9c\x93\n", Defaults()).ok());
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

std::string InferManifest(const std::string& inference, const std::string& handler = "inference") {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: fmnist-infer}\nspec:\n"
         "  handler: " +
         handler + "\n  concurrency: 64\n" + inference;
}

TEST(ManifestTest, InferenceFunction) {
  const FunctionSpec s =
      Parsed(InferManifest("  inference:\n    modelName: fmnist\n    source: {flJob: fmnist}\n"
                           "    device: cpu\n    precision: bf16\n    threads: 2\n"
                           "    maxBatchSize: 16\n    maxQueueDelay: 500us\n"));
  EXPECT_EQ(s.handler.builtin, "inference");
  EXPECT_EQ(s.concurrency, 64u);
  EXPECT_EQ(s.handler.env.at(kInferModelEnv), "fmnist");
  EXPECT_EQ(s.handler.env.at(kInferFlJobEnv), "fmnist");
  EXPECT_EQ(s.handler.env.count(kInferOnnxEnv), 0u);
  EXPECT_EQ(s.handler.env.at(kInferDeviceEnv), "cpu");
  EXPECT_EQ(s.handler.env.at(kInferPrecisionEnv), "bf16");
  EXPECT_EQ(s.handler.env.at(kInferMaxBatchEnv), "16");
  EXPECT_EQ(s.handler.env.at(kInferThreadsEnv), "2");
  EXPECT_EQ(s.handler.env.at(kInferMaxDelayEnv), "500");
  EXPECT_EQ(InferenceModelName(s), "fmnist");

  // Defaults: the model is named after the function; auto device, fp32, 32 rows, 2 ms.
  const FunctionSpec d =
      Parsed(InferManifest("  inference:\n    source: {flJob: fmnist}\n", "{builtin: inference}"));
  EXPECT_EQ(InferenceModelName(d), "fmnist-infer");
  EXPECT_EQ(d.handler.env.at(kInferDeviceEnv), "auto");
  EXPECT_EQ(d.handler.env.at(kInferPrecisionEnv), "fp32");
  EXPECT_EQ(d.handler.env.at(kInferMaxBatchEnv), "32");
  EXPECT_EQ(d.handler.env.at(kInferMaxDelayEnv), "2000");

  // The shipped example parses.
  std::ifstream f(std::string(SHOAL_SOURCE_DIR) + "/deploy/examples/infer-fmnist.yaml");
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(InferenceModelName(Parsed(text.str())), "fmnist");
}

TEST(ManifestTest, InferenceErrorsNameTheField) {
  ExpectErrors(
      ErrorOf,
      {
          {InferManifest(""),
           "spec.inference: required for handler inference (at least source: {flJob: JOB} or "
           "{onnx: /path}) (line 5)"},
          {InferManifest("  inference: {source: {flJob: a}}\n", "echo"),
           "spec.inference: only applies to handler: inference (line 7)"},
          {InferManifest("  inference:\n    device: cpu\n"), "spec.inference.source: required"},
          {InferManifest("  inference:\n    source: {flJob: a, onnx: /x.onnx}\n"),
           "spec.inference.source: set exactly one of flJob, onnx or lm (line 8)"},
          {InferManifest("  inference:\n    source: {onnx: model.onnx}\n"),
           "spec.inference.source.onnx: must be an absolute path, got \"model.onnx\" (line 8)"},
          {InferManifest("  inference:\n    source: {onnx: /no/such.onnx}\n"),
           "spec.inference.source.onnx: no such file on this node: /no/such.onnx (line 8)"},
          {InferManifest("  inference:\n    source: {flJob: a}\n    device: tpu\n"),
           "spec.inference.device: must be auto | cpu | cuda, got \"tpu\" (line 9)"},
          {InferManifest("  inference:\n    source: {flJob: a}\n    precision: int8\n"),
           "spec.inference.precision: must be fp32 | fp16 | bf16, got \"int8\" (line 9)"},
          {InferManifest("  inference:\n    source: {flJob: a}\n    maxBatchSize: 0\n"),
           "spec.inference.maxBatchSize: must be between 1 and 4096, got 0 (line 9)"},
          {InferManifest("  inference:\n    source: {flJob: a}\n    maxQueueDelay: 2s\n"),
           "spec.inference.maxQueueDelay: must be at most 1s, got 2s (line 9)"},
          {InferManifest("  inference:\n    source: {flJob: a}\n    maxQueueDelay: soon\n"),
           "spec.inference.maxQueueDelay: must be a duration like 500us, 2ms or 0 (no waiting), "
           "got \"soon\" (line 9)"},
          {InferManifest("  inference:\n    source: {flJob: a}\n    batch: 3\n"),
           "spec.inference.batch: unknown field (line 9)"},
          {InferManifest("  inference:\n    modelName: Bad_Name\n    source: {flJob: a}\n"),
           "spec.inference.modelName: must be a DNS label (lower-case letters, digits and '-', "
           "starting and ending with a letter or digit, at most 63 characters), got "
           "\"Bad_Name\" (line 8)"},
      });
  EXPECT_TRUE(ErrorOf(InferManifest("", "onnx"))
                  .starts_with("spec.handler: unknown built-in handler \"onnx\""));
}

// spec.inference.source.lm: a language model and its adapters, as handler environment.
TEST(ManifestTest, LanguageModelSource) {
  const std::string dir = ::testing::TempDir() + "manifest-lm";
  std::filesystem::create_directories(dir);
  const std::string base = dir + "/base.safetensors";
  const std::string ft = dir + "/ft.safetensors";
  for (const std::string& p : {base, ft}) std::ofstream(p) << "x";
  const FunctionSpec s =
      Parsed(InferManifest("  inference:\n    source:\n      lm:\n        base: " + base +
                           "\n        adapters:\n          - {name: ft, path: " + ft +
                           "}\n          - {name: live, flJob: lora-job, alpha: 16}\n"));
  EXPECT_EQ(s.handler.env.at("SHOAL_INFER_LM_BASE"), base);
  EXPECT_EQ(s.handler.env.at("SHOAL_INFER_LM_ADAPTERS"),
            "[{\"name\":\"ft\",\"path\":\"" + ft +
                "\"},{\"alpha\":16.0,\"flJob\":\"lora-job\",\"name\":\"live\"}]");
  EXPECT_EQ(s.handler.env.at(kInferFlJobEnv), "lora-job");  // shoald's token for the instance
  EXPECT_EQ(InferenceModelName(s), "fmnist-infer");
  auto lm = [&](const std::string& body) {
    return ErrorOf(InferManifest("  inference:\n    source: {lm: " + body + "}\n"));
  };
  EXPECT_EQ(lm("{adapters: []}"), "spec.inference.source.lm.base: required");
  EXPECT_EQ(lm("{base: /no/such.safetensors}"),
            "spec.inference.source.lm.base: no such file on this node: /no/such.safetensors "
            "(line 8)");
  EXPECT_EQ(lm("{base: " + base + ", adapters: [{name: a, path: " + ft + ", flJob: j}]}"),
            "spec.inference.source.lm.adapters[0]: set exactly one of path or flJob (line 8)");
  EXPECT_EQ(lm("{base: " + base + ", adapters: [{name: a, flJob: j}, {name: a, flJob: k}]}"),
            "spec.inference.source.lm.adapters[1].name: repeats \"a\" (line 8)");
  EXPECT_EQ(lm("{base: " + base + ", adapters: [{name: a, flJob: j}, {name: b, flJob: k}]}"),
            "spec.inference.source.lm.adapters[1].flJob: adapters of one function follow one FL "
            "job (\"j\" already) (line 8)");
  EXPECT_EQ(lm("{base: " + base + ", adapters: [{name: a, flJob: j, alpha: 0}]}"),
            "spec.inference.source.lm.adapters[0].alpha: must be positive (line 8)");
  // int8 weights for a language model only; fp16/bf16 for the graph executors only.
  const std::string lm_int8 =
      InferManifest("  inference:\n    source: {lm: {base: " + base + "}}\n    precision: int8\n");
  EXPECT_EQ(Parsed(lm_int8).handler.env.at(kInferPrecisionEnv), "int8");
  EXPECT_EQ(ErrorOf(InferManifest("  inference:\n    source: {lm: {base: " + base +
                                  "}}\n    precision: fp16\n")),
            "spec.inference.precision: must be fp32 | int8, got \"fp16\" (line 9)");
  EXPECT_EQ(lm("{base: " + base + ", adapters: [{name: a, flJob: j, rank: 4}]}"),
            "spec.inference.source.lm.adapters[0].rank: unknown field (line 8)");
}

TEST(ManifestTest, HandlerEnvThatLoadsCodeIsRefused) {
  const std::string head =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: h}\nspec:\n"
      "  handler:\n    builtin: echo\n";
  EXPECT_EQ(ErrorOf(head + "    env: {LD_PRELOAD: /tmp/x.so}\n"),
            "spec.handler.env.LD_PRELOAD: not allowed: the dynamic loader reads LD_* variables "
            "(preloads code) (line 7)");
  EXPECT_EQ(ErrorOf(head + "    env: {OK: 1, GCONV_PATH: /tmp}\n"),
            "spec.handler.env.GCONV_PATH: not allowed: glibc or a language runtime loads code or "
            "data files named by it (line 7)");
  EXPECT_EQ(Parsed(head + "    env: {MY_SETTING: x}\n").handler.env.at("MY_SETTING"), "x");
}

TEST(ManifestTest, SeccompAllowList) {
  const std::string head =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: h}\nspec:\n"
      "  handler: echo\n  security:\n    seccomp:\n";
  EXPECT_EQ(Parsed(head + "      allow: [ptrace, unshare, ptrace]\n").security.seccomp_allow,
            (std::vector<std::string>{"ptrace", "unshare"}));
  ExpectErrors(
      ErrorOf,
      {
          {head + "      allow: [ptrace, nosuchcall]\n",
           "spec.security.seccomp.allow[1]: unknown syscall \"nosuchcall\" (line 8)"},
          {head + "      allow: ptrace\n",
           "spec.security.seccomp.allow: must be a list of syscall names (line 8)"},
          {head + "      deny: [read]\n", "spec.security.seccomp.deny: unknown field (line 8)"},
      });
}

TEST(ManifestTest, SecurityOnAnomalyAndAllowedPaths) {
  const std::string head =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: h}\nspec:\n"
      "  handler: echo\n  security:\n";
  const FunctionSpec plain = Parsed(head + "    seccomp: {allow: [ptrace]}\n");
  EXPECT_EQ(plain.security.on_anomaly, "alert");  // the default
  EXPECT_TRUE(plain.security.allowed_paths.empty());
  const FunctionSpec s = Parsed(
      head + "    onAnomaly: quarantine\n    allowedPaths: [/var/lib/models/, /etc/hosts]\n");
  EXPECT_EQ(s.security.on_anomaly, "quarantine");
  EXPECT_EQ(s.security.allowed_paths, (std::vector<std::string>{"/var/lib/models/", "/etc/hosts"}));
  ExpectErrors(
      ErrorOf,
      {
          {head + "    onAnomaly: kill\n",
           "spec.security.onAnomaly: must be alert or quarantine, got \"kill\" (line 7)"},
          {head + "    allowedPaths: /etc\n",
           "spec.security.allowedPaths: must be a list of absolute paths (line 7)"},
          {head + "    allowedPaths: [/etc/, models/]\n",
           "spec.security.allowedPaths[1]: must be an absolute path, got \"models/\" (line 7)"},
          {head + "    onAnomalies: alert\n", "spec.security.onAnomalies: unknown field (line 7)"},
      });
}

}  // namespace
}  // namespace shoal
