// Manifests: Kubernetes-style YAML (or JSON) documents of kind Function (validated into
// FunctionSpecs with every default resolved from the node's config) and of kind FLJob (validated
// into FlJobSpecs). Every error a user can make names the field path and, where the field
// exists, the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/interfaces/fljob_spec.h"
#include "shoal/interfaces/function_spec.h"

namespace shoal {

inline constexpr std::string_view kFunctionApiVersion = "shoal.dev/v1";
inline constexpr uint32_t kMaxConcurrency = 1024;  // per instance
inline constexpr uint32_t kMaxScale = 63;          // instances per function on one node
inline constexpr int64_t kMaxInferBatch = 4096;    // spec.inference.maxBatchSize
inline constexpr int64_t kDefaultInferMaxBatch = 32;
inline constexpr double kDefaultInferMaxQueueDelayS = 0.002;    // spec.inference.maxQueueDelay
inline constexpr double kMaxDurationSeconds = 7 * 24 * 3600.0;  // timeout, keepAlive, deadlines

// FL algorithms an FLJob may name (spec.algorithm.name).
inline constexpr const char* kFlAlgorithms[] = {"fedavg",  "fedavgm", "fedadam",   "fedasync",
                                                "fedbuff", "fedfix",  "fedcompass"};
// Model architectures the client library trains (spec.model.architecture).
inline constexpr const char* kFlArchitectures[] = {"mlp", "cnn", "logreg"};
inline constexpr uint32_t kMaxFlClients = 100000;  // spec.clients.expected
inline constexpr uint32_t kMaxFlFanIn = 1024;      // spec.aggregation.maxFanIn

// The documents of one deploy, by kind, each list in document order.
struct Manifests {
  std::vector<FunctionSpec> functions;
  std::vector<FlJobSpec> jobs;
};

// Parses every document of `yaml` (separated by `---`; empty documents are skipped). Fails with
// kInvalidArgument on the first error, e.g.
//   "spec.scale.max: must be >= spec.scale.min (2 > 1) (line 12)".
// On success each spec has `manifest` set to its own document's text, `id` and `generation` 0
// (the registry assigns them), and concurrency, max_scale, timeout_s, keep_alive_s and
// max_body_bytes resolved from `defaults`. Two documents with the same name are an error.
Result<std::vector<FunctionSpec>> ParseFunctionManifests(std::string_view yaml,
                                                         const NodeConfig& defaults);

// Parses a stream that may mix Function and FLJob documents. All of them are validated before
// this returns, so a caller that deploys only on success deploys all or nothing. FLJob specs
// come back with `manifest` set and `generation` 0 (the job service assigns it); algorithm
// parameter names are not checked here (the coordinator knows each algorithm's), only that
// each is a number. Two documents of one kind with the same name are an error.
Result<Manifests> ParseManifests(std::string_view yaml, const NodeConfig& defaults);

// FLJob documents only (a Function document is an error naming its kind).
Result<std::vector<FlJobSpec>> ParseFlJobManifests(std::string_view yaml);

// Small value parsers shared with the CLI and tests. Each returns false on malformed input.
// "500us", "250ms", "30s", "2m", "1h", "1.5" (seconds).
bool ParseDuration(std::string_view text, double* seconds);
// "1024", "64Ki", "1.5Gi", "2M" (K/M/G/T decimal, Ki/Mi/Gi/Ti binary).
bool ParseQuantity(std::string_view text, uint64_t* bytes);
// "2", "0.5", "500m" (millicores).
bool ParseCpu(std::string_view text, double* cores);
// [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool IsDnsLabel(std::string_view name);

}  // namespace shoal
