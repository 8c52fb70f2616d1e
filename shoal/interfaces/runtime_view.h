// What the control API needs from the node's runtime: live state of each function's instances
// and their logs, and a way to tell the runtime that the registry changed. shoald implements
// it; tests implement it with a fake.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/interfaces/function_spec.h"

namespace shoal {

struct InstanceInfo {
  uint32_t id = 0;  // endpoint key
  int pid = 0;
  std::string state;  // starting, ready, draining, stopped, crashed, quarantined
  uint32_t inflight = 0;
  uint64_t served = 0;  // requests answered
  double age_s = 0;
  double cold_start_ms = 0;  // spawn -> ready
  std::string start_path;    // zygote | spawn: how it was started
  std::string start_note;    // why a spawn where the node starts instances from zygotes
  uint32_t restarts = 0;
  std::string quarantine;  // quarantined: why, and the frozen cgroup to inspect
};

// An anomaly the compromise detector (shoal/security/detect/) found in one of the function's
// instances.
struct AnomalyInfo {
  double age_s = 0;  // since it was found
  uint32_t instance = 0;
  std::string kind;  // exec, connect, file, cpu, syscalls, traffic, process
  std::string evidence;
  std::string action;  // alerted | quarantined | quarantine failed: <why>
};

struct FunctionStats {
  uint32_t desired = 0;  // replicas the instance manager wants
  uint32_t ready = 0;    // instances taking requests
  uint32_t starting = 0;
  uint32_t inflight = 0;
  uint32_t queued = 0;  // requests waiting in the gateway for a free instance
  double rps = 0;       // over the last 10 s
  double p50_ms = 0;    // over the last 10 s (0 when idle)
  double p99_ms = 0;
  uint64_t requests_total = 0;
  uint64_t errors_total = 0;  // responses with status >= 500
  uint64_t cold_starts = 0;
  double last_cold_start_ms = 0;
  // The autoscaler (policy "none": the reactive scaler, which decides every tick).
  std::string policy = "none";
  uint32_t actual = 0;             // starting + ready
  uint32_t decision_replicas = 0;  // the latest decision: replicas, pre-warm, keep-alive
  uint32_t decision_prewarm = 0;
  double decision_keep_alive_s = 0;
  double decision_target = 0;  // per-instance concurrency target
  bool decision_panic = false;
  double decision_age_s = -1;   // since the latest decision (-1: none yet)
  std::string decision_reason;  // what changed last, for `shoal describe`
  // Why placement refuses to start an instance (naming the resource); empty when it can.
  std::string unschedulable;
  uint64_t prewarm_starts = 0;
  uint64_t cold_starts_avoided = 0;
  uint64_t cold_requests = 0;   // requests that waited for a cold start
  double instance_seconds = 0;  // spawn to exit, summed over this generation's instances
  uint64_t bpf_events = 0;      // from the data plane's counters (0 in unix mode)
  uint64_t bpf_bytes = 0;
  std::vector<InstanceInfo> instances;
  // The compromise detector: "off: <why>", "learning (3 of 12 intervals)", "scoring (...)";
  // its action (alert | quarantine) and its latest anomalies, newest first.
  std::string detector;
  std::string on_anomaly;
  uint64_t anomalies_total = 0;
  std::vector<AnomalyInfo> anomalies;
};

struct LogChunk {
  std::string text;
  uint64_t next_offset = 0;  // pass back to continue (follow mode)
};

// One tenant's shared-memory pool, as `GET /v1/node` and the console show it.
struct TenantPoolInfo {
  std::string tenant;
  std::string backend;  // boost | dpdk
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t live_buffers = 0;
  uint64_t alloc_failures = 0;
};

class RuntimeView {
 public:
  virtual ~RuntimeView() = default;
  // The registry changed (deploy, re-deploy or delete): reconcile. Called on any thread.
  virtual void FunctionsChanged() = 0;
  virtual FunctionStats Stats(const std::string& function) = 0;
  // Logs of the function's instances (stdout and stderr, prefixed by instance), from `offset`.
  virtual LogChunk Logs(const std::string& function, uint64_t offset, uint64_t max_bytes) = 0;
  virtual std::string DataPlaneMode() = 0;  // "sockmap" or "unix"
  // The node's tenant pools (none where the runtime keeps no pools, as in tests' fakes).
  virtual std::vector<TenantPoolInfo> Pools() { return {}; }
};

}  // namespace shoal
