// FLJob manifests: every field, the defaults written in fljob_spec.h, and each error a user can
// make with its exact message (field path and line).
#include <gtest/gtest.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "manifest_refusals.h"
#include "shoal/control/node/manifest.h"

namespace shoal {
namespace {

std::string ErrorOf(const std::string& yaml) { return RefusalOf(ParseFlJobManifests(yaml), yaml); }

// A minimal FLJob: metadata on lines 3-4, spec on line 5, clients on 6-7; `extra` follows
// (indented two spaces below spec) from line 8.
std::string Job(const std::string& extra = "", const std::string& name = "fmnist") {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  clients:\n    expected: 16\n" + extra;
}

// The one job `yaml` declares; a failure (and an empty spec) when it is refused or declares
// another number of them.
FlJobSpec Parsed(const std::string& yaml) {
  auto r = ParseFlJobManifests(yaml);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << yaml;
  if (!r.ok()) return {};
  EXPECT_EQ(r->size(), 1u) << yaml;
  return r->empty() ? FlJobSpec{} : r->front();
}

// The spec in the manifest's words, a section a line (robust, generation and the manifest text
// aside), to compare whole; numbers in their shortest exact form.
std::string AsManifest(const FlJobSpec& s) {
  auto num = [](double v) {
    char b[32];
    return std::string(b, std::to_chars(b, b + sizeof b, v).ptr);
  };
  std::ostringstream o;
  o << "name: " << s.name << "\nnamespace: " << s.tenant << "\nalgorithm: {name: " << s.algorithm
    << ", params: {";
  for (const auto& [k, v] : s.algorithm_params) {
    o << (k == s.algorithm_params.begin()->first ? "" : ", ") << k << ": " << num(v);
  }
  o << "}}\nmodel: {architecture: " << s.architecture << ", hidden: " << s.hidden
    << ", initial: " << s.initial_model << ", seed: " << s.seed
    << "}\ndata: {dataset: " << s.dataset << "}\nclients: {expected: " << s.clients
    << ", quorum: " << s.quorum << ", tokens: [";
  for (size_t i = 0; i < s.join_tokens.size(); ++i) o << (i ? ", " : "") << s.join_tokens[i];
  o << "]}\nstop: {rounds: " << s.rounds << ", accuracy: " << num(s.target_accuracy)
    << "}\ndeadlines: {round: " << num(s.round_deadline_s)
    << "s}\ntraining: {localSteps: " << s.local_steps << ", learningRate: " << num(s.learning_rate)
    << ", batchSize: " << s.batch_size << "}\naggregation: {maxStaleness: " << s.staleness_limit
    << ", maxFanIn: " << s.max_fan_in << ", maxLeaves: " << s.max_leaves
    << ", device: " << s.aggregation_device << "}\n";
  return o.str();
}

class InitialModel {
 public:
  InitialModel() {
    char tmpl[] = "/tmp/shoal-fljob-test-XXXXXX";
    const int fd = mkstemp(tmpl);
    path_ = tmpl;
    ::close(fd);
  }
  ~InitialModel() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(FlJobManifestTest, EveryField) {
  InitialModel init;
  const std::string yaml = R"(apiVersion: shoal.dev/v1
kind: FLJob
metadata:
  name: fmnist
  namespace: lab
spec:
  algorithm:
    name: fedcompass
    params: {alpha: 0.9, qMin: 20, lambda: 1.5e0}
  model: {architecture: cnn, hidden: 64, initial: )" +
                           init.path() + R"(, seed: 7}
  data: {dataset: digits}
  clients: {expected: 16, quorum: 12, tokens: [t1, "t2"]}
  stop: {rounds: 50, accuracy: 0.85}
  deadlines: {round: 2m}
  training: {localSteps: 50, learningRate: 0.05, batchSize: 64}
  aggregation: {maxStaleness: 5, maxFanIn: 4, maxLeaves: 2, device: gpu}
)";
  const FlJobSpec s = Parsed(yaml);
  const std::string model =
      "model: {architecture: cnn, hidden: 64, initial: " + init.path() + ", seed: 7}\n";
  EXPECT_EQ(AsManifest(s),
            "name: fmnist\n"
            "namespace: lab\n"
            "algorithm: {name: fedcompass, params: {alpha: 0.9, lambda: 1.5, qMin: 20}}\n" +
                model +
                "data: {dataset: digits}\n"
                "clients: {expected: 16, quorum: 12, tokens: [t1, t2]}\n"
                "stop: {rounds: 50, accuracy: 0.85}\n"
                "deadlines: {round: 120s}\n"
                "training: {localSteps: 50, learningRate: 0.05, batchSize: 64}\n"
                "aggregation: {maxStaleness: 5, maxFanIn: 4, maxLeaves: 2, device: gpu}\n");
  EXPECT_EQ(s.generation, 0u);
  EXPECT_EQ(s.manifest, yaml);
}

TEST(FlJobManifestTest, DefaultsAreFljobSpecs) {
  const FlJobSpec s = Parsed(Job());
  FlJobSpec want;  // fljob_spec.h's defaults
  want.name = "fmnist";
  want.clients = 16;
  want.manifest = Job();
  EXPECT_EQ(AsManifest(s), AsManifest(want));
  EXPECT_EQ(AsManifest(s),
            "name: fmnist\n"
            "namespace: default\n"
            "algorithm: {name: fedavg, params: {}}\n"
            "model: {architecture: mlp, hidden: 128, initial: , seed: 1}\n"
            "data: {dataset: fashion-mnist}\n"
            "clients: {expected: 16, quorum: 0, tokens: []}\n"
            "stop: {rounds: 0, accuracy: 0}\n"
            "deadlines: {round: 0s}\n"
            "training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
            "aggregation: {maxStaleness: 20, maxFanIn: 8, maxLeaves: 4, device: auto}\n");
  // Every algorithm name is accepted.
  for (const char* a : kFlAlgorithms) {
    auto j = ParseFlJobManifests(Job("  algorithm: {name: " + std::string(a) + "}\n"));
    ASSERT_TRUE(j.ok()) << a << ": " << j.status().message();
    EXPECT_EQ((*j)[0].algorithm, a);
  }
}

TEST(FlJobManifestTest, HeaderAndMetadataErrors) {
  ExpectErrors(
      ErrorOf,
      {
          {"apiVersion: shoal.dev/v2\nkind: FLJob\n",
           "apiVersion: expected shoal.dev/v1, got shoal.dev/v2 (line 1)"},
          {"apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: a}\n",
           "kind: expected FLJob, got Function (line 2)"},
          {"apiVersion: shoal.dev/v1\nmetadata: {name: a}\n", "kind: expected FLJob"},
          {"apiVersion: shoal.dev/v1\nkind: FLJob\nspec: {}\n", "metadata: required"},
          {Job("", "Bad_Name"),
           "metadata.name: must be a DNS label (lower-case letters, digits and '-', starting and "
           "ending with a letter or digit, at most 63 characters), got \"Bad_Name\" (line 4)"},
          {"apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: a\n  labels: {}\n",
           "metadata.labels: unknown field (line 5)"},
          {"apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: a\n", "spec: required"},
          {Job("  rounds: 3\n"), "spec.rounds: unknown field (line 8)"},
          {"", "no FLJob documents in the manifest"},
          {Job() + "---\n" + Job(),
           "metadata.name: duplicate FLJob \"fmnist\" in one deploy (lines 4 and 12)"},
      });
}

TEST(FlJobManifestTest, FieldErrorsNameThePathAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  algorithm: fedavg\n", "spec.algorithm: must be a mapping (line 8)"},
      {"  algorithm: {params: {}}\n", "spec.algorithm.name: required"},
      {"  algorithm: {name: fedsgd}\n",
       "spec.algorithm.name: unknown algorithm \"fedsgd\" (one of: fedavg, fedavgm, fedadam, "
       "fedasync, fedbuff, fedfix, fedcompass) (line 8)"},
      {"  algorithm: {name: fedavg, extra: 1}\n", "spec.algorithm.extra: unknown field (line 8)"},
      {"  algorithm:\n    name: fedasync\n    params: {alpha: high}\n",
       "spec.algorithm.params.alpha: must be a number, got \"high\" (line 10)"},
      {"  algorithm:\n    name: fedasync\n    params: {alpha: [1]}\n",
       "spec.algorithm.params.alpha: must be a number (line 10)"},
      {"  algorithm:\n    name: fedasync\n    params: {alpha: .nan}\n",
       "spec.algorithm.params.alpha: must be a number, got \".nan\" (line 10)"},
      {"  algorithm:\n    name: fedasync\n    params: [alpha]\n",
       "spec.algorithm.params: must be a mapping (line 10)"},
      {"  model: {architecture: resnet}\n",
       "spec.model.architecture: unknown architecture \"resnet\" (one of: mlp, cnn, logreg) "
       "(line 8)"},
      {"  model: {hidden: 0}\n", "spec.model.hidden: must be between 1 and 65536, got 0 (line 8)"},
      {"  model: {hidden: wide}\n", "spec.model.hidden: must be an integer, got \"wide\" (line 8)"},
      {"  model: {initial: model.safetensors}\n",
       "spec.model.initial: must be an absolute path, got \"model.safetensors\" (line 8)"},
      {"  model: {initial: /nonexistent/m.safetensors}\n",
       "spec.model.initial: no such file on this node: /nonexistent/m.safetensors (line 8)"},
      {"  model: {onnx: model.onnx}\n",
       "spec.model.onnx: must be an absolute path, got \"model.onnx\" (line 8)"},
      {"  model: {onnx: /nonexistent/m.onnx}\n",
       "spec.model.onnx: no such file on this node: /nonexistent/m.onnx (line 8)"},
      {"  model: {architecture: cnn, onnx: /proc/self/exe}\n",
       "spec.model.onnx: give either spec.model.architecture or spec.model.onnx (line 8)"},
      {"  model: {seed: -1}\n",
       "spec.model.seed: must be between 0 and 9223372036854775807, got -1 (line 8)"},
      {"  model: {layers: 3}\n", "spec.model.layers: unknown field (line 8)"},
      {"  data: {dataset: \"\"}\n", "spec.data.dataset: must not be empty (line 8)"},
      {"  data: {split: iid}\n", "spec.data.split: unknown field (line 8)"},
      {"  stop: {rounds: -1}\n",
       "spec.stop.rounds: must be between 0 and 1000000000, got -1 (line 8)"},
      {"  stop: {accuracy: 1.5}\n", "spec.stop.accuracy: must be > 0 and <= 1, got 1.5 (line 8)"},
      {"  stop: {accuracy: 0}\n", "spec.stop.accuracy: must be > 0 and <= 1, got 0 (line 8)"},
      {"  stop: {loss: 0.1}\n", "spec.stop.loss: unknown field (line 8)"},
      {"  deadlines: {round: soon}\n",
       "spec.deadlines.round: must be a duration like 250ms, 30s, 2m or 1h, got \"soon\" (line 8)"},
      {"  deadlines: {round: 0s}\n", "spec.deadlines.round: must be > 0, got 0s (line 8)"},
      {"  deadlines: {join: 1m}\n", "spec.deadlines.join: unknown field (line 8)"},
      {"  training: {localSteps: 0}\n",
       "spec.training.localSteps: must be between 1 and 1000000, got 0 (line 8)"},
      {"  training: {learningRate: -0.1}\n",
       "spec.training.learningRate: must be > 0, got -0.1 (line 8)"},
      {"  training: {learningRate: fast}\n",
       "spec.training.learningRate: must be a number, got \"fast\" (line 8)"},
      {"  training: {batchSize: 0}\n",
       "spec.training.batchSize: must be between 1 and 65536, got 0 (line 8)"},
      {"  training: {epochs: 1}\n", "spec.training.epochs: unknown field (line 8)"},
      {"  aggregation: {maxStaleness: -2}\n",
       "spec.aggregation.maxStaleness: must be between 0 and 1000000, got -2 (line 8)"},
      {"  aggregation: {maxFanIn: 0}\n",
       "spec.aggregation.maxFanIn: must be between 1 and 1024, got 0 (line 8)"},
      {"  aggregation: {maxLeaves: 64}\n",
       "spec.aggregation.maxLeaves: must be between 1 and 63, got 64 (line 8)"},
      {"  aggregation: {leaves: 2}\n", "spec.aggregation.leaves: unknown field (line 8)"},
      {"  aggregation: {device: tpu}\n",
       "spec.aggregation.device: unknown device \"tpu\" (one of: auto, cpu, gpu) (line 8)"},
  };
  for (const auto& [extra, message] : cases) {
    EXPECT_EQ(ErrorOf(Job(extra)), message) << extra;
  }
}

TEST(FlJobManifestTest, ClientsErrors) {
  const std::string head = "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: a\nspec:\n";
  ExpectErrors(
      ErrorOf,
      {
          {head + "  stop: {rounds: 1}\n", "spec.clients: required"},
          {head + "  clients: {quorum: 1}\n", "spec.clients.expected: required"},
          {head + "  clients: {expected: 0}\n",
           "spec.clients.expected: must be between 1 and 100000, got 0 (line 6)"},
          {head + "  clients: {expected: 16, quorum: 17}\n",
           "spec.clients.quorum: must be <= spec.clients.expected (17 > 16) (line 6)"},
          {head + "  clients: {expected: 2, tokens: abc}\n",
           "spec.clients.tokens: must be a list of strings (line 6)"},
          {head + "  clients:\n    expected: 2\n    tokens:\n      - a\n      - \"\"\n",
           "spec.clients.tokens[1]: must not be empty (line 10)"},
          {head + "  clients:\n    expected: 2\n    tokens: [a, b, a]\n",
           "spec.clients.tokens[2]: duplicate token (line 8)"},
          {head + "  clients: {expected: 2, tokens: [{x: 1}]}\n",
           "spec.clients.tokens[0]: must be a string (line 6)"},
          {head + "  clients: {expected: 2, max: 3}\n", "spec.clients.max: unknown field (line 6)"},
      });
}

TEST(FlJobManifestTest, MixedFilesParseBothKindsOrNothing) {
  NodeConfig defaults;
  const std::string fn =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: fmnist\nspec:\n  handler:\n"
      "    builtin: echo\n";
  // A Function and an FLJob may share a name: they are different kinds.
  auto r = ParseManifests(fn + "---\n" + Job(), defaults);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->functions.size(), 1u);
  ASSERT_EQ(r->jobs.size(), 1u);
  EXPECT_EQ(r->functions[0].manifest, fn);
  EXPECT_EQ(r->jobs[0].manifest, Job());
  EXPECT_EQ(r->jobs[0].name, "fmnist");
  // One bad document anywhere fails the whole file, with its own line numbers.
  auto bad = ParseManifests(fn + "---\n" + Job("  training: {batchSize: 0}\n"), defaults);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "spec.training.batchSize: must be between 1 and 65536, got 0 (line 16)");
  auto kind = ParseManifests("apiVersion: shoal.dev/v1\nkind: Job\n", defaults);
  EXPECT_EQ(kind.status().message(), "kind: expected Function or FLJob, got Job (line 2)");
  EXPECT_EQ(ParseManifests("# nothing\n", defaults).status().message(),
            "no Function or FLJob documents in the manifest");
  // The Function-only parser still refuses FLJobs by kind.
  auto only = ParseFunctionManifests(Job(), defaults);
  EXPECT_EQ(only.status().message(), "kind: expected Function, got FLJob (line 2)");
}

// spec.aggregation.robust: each rule with its parameters, and the errors naming the field.
// spec.aggregation.wireFormats: the formats the leaves take, in order; int8/int4 not with the
// rules that read every update at the top.
TEST(FlJobManifestTest, WireFormatsAndTheirErrors) {
  EXPECT_EQ(Parsed(Job()).wire_formats, (std::vector<std::string>{"f32", "bf16", "f16"}));
  EXPECT_EQ(Parsed(Job("  aggregation: {wireFormats: [int8, f32]}\n")).wire_formats,
            (std::vector<std::string>{"int8", "f32"}));
  EXPECT_EQ(Parsed(Job("  aggregation: {wireFormats: [int4]}\n")).wire_formats,
            (std::vector<std::string>{"int4"}));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  aggregation: {wireFormats: []}\n",
       "spec.aggregation.wireFormats: must be a non-empty list of formats (f32, bf16, f16, int8, "
       "int4) (line 8)"},
      {"  aggregation: {wireFormats: int8}\n",
       "spec.aggregation.wireFormats: must be a non-empty list of formats (f32, bf16, f16, int8, "
       "int4) (line 8)"},
      {"  aggregation: {wireFormats: [int2]}\n",
       "spec.aggregation.wireFormats[0]: unknown format \"int2\" (one of: f32, bf16, f16, int8, "
       "int4) (line 8)"},
      {"  aggregation: {wireFormats: [int8, int8]}\n",
       "spec.aggregation.wireFormats[1]: duplicate format (line 8)"},
      {"  aggregation: {wireFormats: [int8], robust: {rule: median}}\n",
       "spec.aggregation.wireFormats: int8 and int4 cannot be combined with "
       "spec.aggregation.robust (it reads f32, bf16 or f16 updates) (line 8)"},
      {"  aggregation: {wireFormats: [f32, int4]}\n  privacy: {dp: {noiseMultiplier: 1, clip: "
       "{fixed: 1}}}\n",
       "spec.aggregation.wireFormats: int8 and int4 cannot be combined with spec.privacy.dp (it "
       "reads f32, bf16 or f16 updates) (line 8)"},
  };
  for (const auto& [extra, message] : cases) {
    EXPECT_EQ(ErrorOf(Job(extra)), message) << extra;
  }
}

TEST(FlJobManifestTest, RobustAggregationRulesAndTheirErrors) {
  auto r = ParseFlJobManifests(
      Job("  aggregation:\n    robust: {rule: krum, f: 2, m: 5, clipNorm: 2.5}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const FlRobustSpec& k = (*r)[0].robust;
  EXPECT_EQ(k.rule, "krum");
  EXPECT_EQ(k.f, 2u);
  EXPECT_EQ(k.m, 5u);
  EXPECT_DOUBLE_EQ(k.clip_norm, 2.5);
  EXPECT_TRUE(k.enabled());
  r = ParseFlJobManifests(Job("  aggregation: {robust: {rule: trimmedMean, beta: 0.25}}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].robust.rule, "trimmedMean");
  EXPECT_DOUBLE_EQ((*r)[0].robust.beta, 0.25);
  r = ParseFlJobManifests(Job("  aggregation: {robust: {clipNorm: 1}}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].robust.rule, "none");
  EXPECT_TRUE((*r)[0].robust.enabled());
  r = ParseFlJobManifests(Job("  aggregation: {robust: {rule: flag, clipNorm: median}}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE((*r)[0].robust.clip_median);
  EXPECT_EQ((*r)[0].robust.clip_norm, 0);
  r = ParseFlJobManifests(Job("  aggregation: {robust: {rule: flag, rank: 2}}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].robust.rank, 2u);
  r = ParseFlJobManifests(Job());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].robust.enabled());

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  aggregation: {robust: {rule: mode}}\n",
       "spec.aggregation.robust.rule: unknown rule \"mode\" (one of: none, median, trimmedMean, "
       "krum, flag) (line 8)"},
      {"  aggregation: {robust: {rule: trimmedMean, beta: 0.5}}\n",
       "spec.aggregation.robust.beta: must be >= 0 and < 0.5 (the fraction dropped at each end), "
       "got 0.5 (line 8)"},
      {"  aggregation: {robust: {rule: median, f: 1}}\n",
       "spec.aggregation.robust.f: is a parameter of rule krum, not \"median\" (line 8)"},
      {"  aggregation: {robust: {rule: krum, f: -1}}\n",
       "spec.aggregation.robust.f: must be between 0 and 65535, got -1 (line 8)"},
      {"  aggregation: {robust: {rule: flag, rank: 0}}\n",
       "spec.aggregation.robust.rank: must be between 1 and 65535, got 0 (line 8)"},
      {"  aggregation: {robust: {clipNorm: 0}}\n",
       "spec.aggregation.robust.clipNorm: must be > 0 or median (leave it out for no clipping), "
       "got 0 (line 8)"},
      {"  aggregation: {robust: {clipNorm: mean}}\n",
       "spec.aggregation.robust.clipNorm: must be a number > 0 or median, got \"mean\" (line 8)"},
      {"  aggregation: {robust: {rule: median, z: 1}}\n",
       "spec.aggregation.robust.z: unknown field (line 8)"},
      {"  aggregation: {robust: median}\n", "spec.aggregation.robust: must be a mapping (line 8)"},
  };
  for (const auto& [extra, want] : cases) EXPECT_EQ(ErrorOf(Job(extra)), want) << extra;
}

// spec.privacy.dp: fixed and adaptive clipping with their defaults, and the errors naming the
// field (the combinations the coordinator checks too: an asynchronous algorithm, a robust rule).
TEST(FlJobManifestTest, DifferentialPrivacyAndItsErrors) {
  FlJobSpec s =
      Parsed(Job("  privacy:\n    dp: {noiseMultiplier: 1.1, clip: {fixed: 0.5}, delta: 1.0e-6, "
                 "budget: 8}\n"));
  const FlDpSpec& d = s.privacy.dp;
  EXPECT_TRUE(d.enabled);
  EXPECT_DOUBLE_EQ(d.noise_multiplier, 1.1);
  EXPECT_DOUBLE_EQ(d.clip, 0.5);
  EXPECT_FALSE(d.adaptive);
  EXPECT_DOUBLE_EQ(d.delta, 1e-6);
  EXPECT_DOUBLE_EQ(d.budget, 8);
  s =
      Parsed(Job("  privacy:\n    dp:\n      noiseMultiplier: 1\n      clip:\n        adaptive: "
                 "{initial: 0.1, targetQuantile: 0.6, learningRate: 0.3, "
                 "countNoiseMultiplier: 2}\n"));
  EXPECT_TRUE(s.privacy.dp.adaptive);
  EXPECT_DOUBLE_EQ(s.privacy.dp.clip, 0.1);
  EXPECT_DOUBLE_EQ(s.privacy.dp.target_quantile, 0.6);
  EXPECT_DOUBLE_EQ(s.privacy.dp.clip_learning_rate, 0.3);
  EXPECT_DOUBLE_EQ(s.privacy.dp.count_noise_multiplier, 2);
  EXPECT_DOUBLE_EQ(s.privacy.dp.delta, 1e-5);  // the default
  EXPECT_EQ(s.privacy.dp.budget, 0);
  EXPECT_FALSE(Parsed(Job()).privacy.dp.enabled);

  const std::string dp = "  privacy:\n    dp: ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dp + "{clip: {fixed: 1}}\n",
       "spec.privacy.dp.noiseMultiplier: required (σ: the noise's standard deviation over the "
       "clip) (line 9)"},
      {dp + "{noiseMultiplier: -1, clip: {fixed: 1}}\n",
       "spec.privacy.dp.noiseMultiplier: must be >= 0, got -1 (line 9)"},
      {dp + "{noiseMultiplier: 1}\n",
       "spec.privacy.dp.clip: required ({fixed: C} or {adaptive: {...}}) (line 9)"},
      {dp + "{noiseMultiplier: 1, clip: {fixed: 0}}\n",
       "spec.privacy.dp.clip.fixed: must be > 0, got 0 (line 9)"},
      {dp + "{noiseMultiplier: 1, clip: {fixed: 1, adaptive: {initial: 1}}}\n",
       "spec.privacy.dp.clip: one of fixed or adaptive, not both (line 9)"},
      {dp + "{noiseMultiplier: 1, clip: {adaptive: {targetQuantile: 0.5}}}\n",
       "spec.privacy.dp.clip.adaptive.initial: required"},
      {dp + "{noiseMultiplier: 1, clip: {adaptive: {initial: 1, targetQuantile: 2}}}\n",
       "spec.privacy.dp.clip.adaptive.targetQuantile: must be between 0 and 1, got 2 (line 9)"},
      {dp + "{noiseMultiplier: 1, clip: {fixed: 1}, delta: 1}\n",
       "spec.privacy.dp.delta: must be > 0 and < 1, got 1 (line 9)"},
      {dp + "{noiseMultiplier: 1, clip: {fixed: 1}, budget: 0}\n",
       "spec.privacy.dp.budget: must be > 0, got 0 (line 9)"},
      {dp + "{noiseMultiplier: 1, clip: {fixed: 1}, epsilon: 3}\n",
       "spec.privacy.dp.epsilon: unknown field (line 9)"},
      {"  privacy: {ldp: {}}\n", "spec.privacy.ldp: unknown field (line 8)"},
      {"  algorithm: {name: fedbuff}\n" + dp + "{noiseMultiplier: 1, clip: {fixed: 1}}\n",
       "spec.privacy.dp: central DP clips each update's change from the model version a "
       "synchronous round shares; algorithm fedbuff mixes base versions, so no update's influence "
       "is bounded by the clip (use fedavg, fedavgm or fedadam) (line 10)"},
      {"  aggregation: {robust: {rule: median}}\n" + dp +
           "{noiseMultiplier: 1, clip: {fixed: 1}}\n",
       "spec.privacy.dp: cannot run beside spec.aggregation.robust: the noise is calibrated to the "
       "clipped mean's sensitivity C/n, not a robust rule's (line 10)"},
      {dp + "{noiseMultiplier: 2, clip: {adaptive: {initial: 1}}}\n",
       "spec.privacy.dp.clip.adaptive.countNoiseMultiplier: the count's noise σ_b = 0.8 "
       "(spec.clients.expected / 20) must exceed noiseMultiplier / 2 = 1, else it spends the "
       "whole budget and leaves no noise for the update (line 9)"},
  };
  for (const auto& [extra, want] : cases) EXPECT_EQ(ErrorOf(Job(extra)), want) << extra;
}

// spec.privacy.secureAggregation: its fields and the errors naming them (what depends on the
// algorithm and spec.clients is the coordinator's: tests/fl/secagg).
TEST(FlJobManifestTest, SecureAggregationFieldsAndTheirErrors) {
  auto r = ParseFlJobManifests(
      Job("  privacy:\n    secureAggregation: {threshold: 5, neighbours: 8, clipRange: 0.5, "
          "bits: 20, stageTimeout: 2s}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const FlSecureAggregationSpec& sa = (*r)[0].privacy.secure_aggregation;
  EXPECT_TRUE(sa.enabled);
  EXPECT_EQ(sa.threshold, 5u);
  EXPECT_EQ(sa.neighbours, 8u);
  EXPECT_DOUBLE_EQ(sa.clip_range, 0.5);
  EXPECT_EQ(sa.bits, 20u);
  EXPECT_DOUBLE_EQ(sa.stage_timeout_s, 2.0);
  r = ParseFlJobManifests(Job());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].privacy.secure_aggregation.enabled);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  privacy: {secureAggregation: {neighbours: 4}}\n",
       "spec.privacy.secureAggregation.threshold: required"},
      {"  privacy: {secureAggregation: {threshold: 3, neighbours: 4, bits: 32}}\n",
       "spec.privacy.secureAggregation.bits: must be between 1 and 31, got 32 (line 8)"},
      {"  privacy: {secureAggregation: {threshold: 3, neighbours: 4, clipRange: 0}}\n",
       "spec.privacy.secureAggregation.clipRange: must be a finite number > 0, got 0 (line 8)"},
      {"  privacy: {secureAggregation: {threshold: 3, neighbours: 4, k: 1}}\n",
       "spec.privacy.secureAggregation.k: unknown field (line 8)"},
  };
  for (const auto& [extra, want] : cases) EXPECT_EQ(ErrorOf(Job(extra)), want) << extra;
}

// spec.durability: partialSums and its interval; refused beside what needs whole updates.
TEST(FlJobManifestTest, DurabilityModesAndTheirRefusals) {
  auto r = ParseFlJobManifests(Job("  durability: {mode: partialSums, checkpointEvery: 3}\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE((*r)[0].durability.partial_sums());
  EXPECT_EQ((*r)[0].durability.checkpoint_every, 3u);
  r = ParseFlJobManifests(Job());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].durability.mode, "updates");
  const std::string why =
      " (it needs the round's whole updates at commit; partialSums drops each update once it is "
      "folded) (line 8)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  durability: {mode: partialSums}\n  aggregation: {robust: {rule: median}}\n",
       "spec.durability.mode: partialSums cannot be combined with spec.aggregation.robust" + why},
      {"  durability: {mode: partialSums}\n  privacy: {dp: {noiseMultiplier: 1, clip: "
       "{fixed: 1}}}\n",
       "spec.durability.mode: partialSums cannot be combined with spec.privacy.dp" + why},
      {"  durability: {mode: partialSums}\n  privacy: {secureAggregation: {threshold: 2, "
       "neighbours: 2}}\n",
       "spec.durability.mode: partialSums cannot be combined with spec.privacy.secureAggregation" +
           why},
      {"  durability: {mode: everything}\n",
       "spec.durability.mode: unknown durability mode \"everything\" (one of: updates, "
       "partialSums) (line 8)"},
      {"  durability: {checkpointEvery: 0}\n",
       "spec.durability.checkpointEvery: must be between 1 and 1000000, got 0 (line 8)"},
  };
  for (const auto& [extra, want] : cases) EXPECT_EQ(ErrorOf(Job(extra)), want) << extra;
}

TEST(FlJobManifestTest, TheShippedExampleParses) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/deploy/examples/fljob-fashion-mnist.yaml");
  ASSERT_TRUE(in) << "deploy/examples/fljob-fashion-mnist.yaml";
  const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(AsManifest(Parsed(yaml)),
            "name: fmnist\n"
            "namespace: default\n"
            "algorithm: {name: fedcompass, params: {alpha: 0.9}}\n"
            "model: {architecture: mlp, hidden: 128, initial: , seed: 1}\n"
            "data: {dataset: fashion-mnist}\n"
            "clients: {expected: 16, quorum: 0, tokens: []}\n"
            "stop: {rounds: 500, accuracy: 0.85}\n"
            "deadlines: {round: 0s}\n"
            "training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
            "aggregation: {maxStaleness: 20, maxFanIn: 8, maxLeaves: 4, device: auto}\n");
}

}  // namespace
}  // namespace shoal
