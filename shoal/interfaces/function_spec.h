// A deployed function as the runtime sees it: what the `Function` manifest says, validated,
// with every default filled in (defaults come from NodeConfig, written once there).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shoal {

struct HandlerSpec {
  // Exactly one of `builtin` or `library` is set.
  std::string builtin;  // "echo", "sha256", "wordcount", "sleep", "crash" (tests), ...
  std::string library;  // absolute path of a user .so implementing the C ABI
                        // (shoal/runtime/instance/handler_abi.h)
  std::string symbol = "shoal_handle";     // entry point in `library`
  std::map<std::string, std::string> env;  // extra environment for the instance process
};

// Built-in handlers that shoal-fn ships (runtime/handlers); a manifest naming another is refused.
inline constexpr const char* kBuiltinHandlers[] = {"echo", "sha256", "wordcount", "sleep",
                                                   "inference"};

// The `inference` handler's settings (the manifest's spec.inference block) travel to its
// instances as handler environment, like every other handler setting.
inline constexpr const char* kInferModelEnv = "SHOAL_INFER_MODEL";          // OIP model name
inline constexpr const char* kInferFlJobEnv = "SHOAL_INFER_FL_JOB";         // source: FL job
inline constexpr const char* kInferOnnxEnv = "SHOAL_INFER_ONNX";            // source: .onnx
inline constexpr const char* kInferDeviceEnv = "SHOAL_INFER_DEVICE";        // auto|cpu|cuda
inline constexpr const char* kInferPrecisionEnv = "SHOAL_INFER_PRECISION";  // fp32|fp16|bf16
inline constexpr const char* kInferThreadsEnv = "SHOAL_INFER_THREADS";      // CPU threads, 0 = all
inline constexpr const char* kInferMaxBatchEnv = "SHOAL_INFER_MAX_BATCH";
inline constexpr const char* kInferMaxDelayEnv = "SHOAL_INFER_MAX_DELAY_US";

// The manifest's `autoscaling:` block (policy "none": shoald's reactive scaler). Parameters are
// checked against shoal/control/autoscaler/function_autoscaler.h when the manifest is parsed.
struct AutoscalingSpec {
  std::string policy = "none";           // none | kpa | rl-q | shoal
  double target = 0;                     // per-instance target of `metric` (0: concurrency)
  std::string metric = "concurrency";    // concurrency | tokensInFlight
  std::string keep_alive = "fixed";      // fixed | histogram
  std::map<std::string, double> params;  // manifest names; durations in seconds
  std::string policy_file;  // learned: the trained table on the node (empty: the compiled-in one)
};

// The manifest's `security:` block: what the instance sandbox lets this function do beyond the
// node's policy (shoal/runtime/sandbox/seccomp_policy.h).
struct SecuritySpec {
  std::vector<std::string> seccomp_allow;  // denied syscalls this function may make
  // What the compromise detector (shoal/security/detect/) does with an anomalous instance: "alert"
  // (log, metric, describe) or "quarantine" (also: no more requests, frozen for inspection, a clean
  // instance started). Files below allowed_paths (prefixes ending in '/', or exact paths) are
  // never anomalies.
  std::string on_anomaly = "alert";
  std::vector<std::string> allowed_paths;
};

struct FunctionSpec {
  uint32_t id = 0;   // stable small integer assigned by the registry (BPF counter index)
  std::string name;  // metadata.name: [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63 chars
  std::string tenant = "default";  // metadata.namespace: selects the shared-memory pool
  std::map<std::string, std::string> labels;
  HandlerSpec handler;
  uint32_t concurrency = 0;  // requests one instance runs at once (0 = node default)
  uint32_t min_scale = 0;
  uint32_t max_scale = 0;   // 0 = node default
  double timeout_s = 0;     // 0 = node default; handler timeout -> 504
  double keep_alive_s = 0;  // 0 = node default; idle instances above min_scale stop after it
  // spec.auth: token — /fn and /v2 answer only requests whose bearer token may invoke it.
  bool require_token = false;
  uint64_t max_body_bytes = 0;  // 0 = node default; larger bodies -> 413
  double cpu = 0;               // resources.cpu (cores); placement reserves it
  uint64_t memory_bytes = 0;    // resources.memory
  uint32_t gpu = 0;             // resources.gpu
  AutoscalingSpec autoscaling;
  SecuritySpec security;
  uint64_t generation = 0;      // bumped by the registry on every re-deploy
  std::string manifest;         // the YAML as deployed (for `shoal get -o yaml`)
  int64_t created_unix_ms = 0;  // first deploy of this name (set by the registry)
  int64_t updated_unix_ms = 0;  // latest deploy
};

// The Open Inference Protocol model name a function serves under /v2/models/{name}; empty for
// functions that are not `inference` handlers.
inline std::string InferenceModelName(const FunctionSpec& spec) {
  if (spec.handler.builtin != "inference") return {};
  auto it = spec.handler.env.find(kInferModelEnv);
  return it == spec.handler.env.end() ? spec.name : it->second;
}

}  // namespace shoal
