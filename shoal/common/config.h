// shoald's configuration: a YAML file whose every key is optional. Each default is written
// once, here, as the member initialiser; `shoald --print-config` shows the effective values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

enum class DataPlaneMode { kAuto, kSockmap, kUnix };
const char* DataPlaneModeName(DataPlaneMode mode);

// Which cgroup hierarchy holds instances: auto = v2 where its cpu and memory controllers can be
// enabled, else v1, else none (logged).
enum class CgroupMode { kAuto, kV2, kV1, kOff };
const char* CgroupModeName(CgroupMode mode);
// How an instance starts: forked from its function's zygote (a shoal-fn that has loaded the
// handler and attached the pool) or spawned as a new shoal-fn (kept for diagnosis).
enum class InstanceStart { kZygote, kSpawn };
const char* InstanceStartName(InstanceStart mode);
// How the behaviour probes watch syscalls (config detect_syscalls: true | false | sampled).
enum class DetectSyscalls { kOn, kOff, kSampled };
const char* DetectSyscallsName(DetectSyscalls mode);

// A tenant's fixed ids (config `tenants: {<namespace>: {uid: N, gid: N}}`).
struct TenantIdConfig {
  uint32_t uid = 0;
  uint32_t gid = 0;
};

struct NodeConfig {
  // Names this shoald; keys its BPF pins (/sys/fs/bpf/shoal/<node_name>) and its abstract
  // unix socket names, so several shoalds can share one machine (tests do).
  std::string node_name = "default";
  std::string listen_host = "0.0.0.0";
  uint16_t listen_port = 8080;
  uint32_t gateway_threads = 0;  // 0 = one event loop per online core
  std::string state_dir = "/var/lib/shoal";
  uint64_t pool_bytes = 1ull << 30;  // shared-memory pool per tenant
  // Pool backend: boost (/dev/shm), dpdk (hugepages) or auto (dpdk where hugepages are free).
  std::string pool = "auto";
  // Boost pools: allocate and map every page of a tenant's pool when it is created, so no
  // request body or partial sum pays a first-touch fault and the kernel's zeroing of a fresh
  // page, and a /dev/shm too small for the pool is an error then rather than a failed write
  // later. It commits the whole pool_bytes per tenant at once (the dpdk backend always does).
  bool pool_prefault = false;
  // Boost pools without pool_prefault: this much of a tenant's never-used pool memory, above
  // its highest allocation, is kept allocated and mapped by a background thread (and by the
  // instances that read whole buffers, in theirs), so bodies and partial sums land on warm
  // pages; commits at most the pool's high-water mark plus this. 0: off (first touch faults).
  uint64_t pool_warm_bytes = 256ull << 20;
  uint64_t max_body_bytes = 128ull << 20;   // larger request bodies get 413
  uint32_t max_queue_per_function = 10000;  // waiting requests beyond this get 503
  DataPlaneMode dataplane = DataPlaneMode::kAuto;
  std::string bpf_pin_root = "/sys/fs/bpf/shoal";
  std::string fn_binary;               // "" = shoal-fn beside the shoald binary
  double default_timeout_s = 30.0;     // per-request handler timeout
  double default_keep_alive_s = 60.0;  // idle instances stop after this
  uint32_t default_concurrency = 1;    // per instance
  uint32_t default_max_scale = 8;
  double restart_backoff_s = 0.2;         // first restart delay after a crash (doubles)
  uint32_t control_interval_ms = 100;     // instance manager's reconcile tick
  uint32_t autoscale_interval_ms = 2000;  // autoscaling policies decide this often (Knative's tick)
  std::string log_level = "info";

  // The control API (/v1 but the FL clients' routes) has a listener of its own, on loopback
  // unless configured otherwise; beyond the host it needs TLS (a PEM certificate and key) or an
  // explicit control_allow_insecure. control_port 0 picks a free port (logged at start).
  std::string control_listen_host = "127.0.0.1";
  uint16_t control_port = 8081;
  std::string control_tls_cert;  // PEM file; with control_tls_key, the listener speaks HTTPS
  std::string control_tls_key;
  bool control_allow_insecure = false;

  // Instance sandbox (README "Instance sandbox").
  // spec.handler.library must lie below one of these; `$ORIGIN` is the directory of the
  // shoald binary (so a build tree's build/lib/shoal/handlers works as installed).
  std::vector<std::string> handler_dirs = {"$ORIGIN/../lib/shoal/handlers",
                                           "/usr/lib/shoal/handlers"};
  std::map<std::string, TenantIdConfig> tenants;  // fixed uid/gid per namespace
  uint32_t tenant_uid_base = 200000;  // other tenants get uid = gid = base + n (persisted)
  uint32_t tenant_uid_count = 65536;
  CgroupMode cgroups = CgroupMode::kAuto;
  std::string cgroup_parent = "shoal";  // below shoald's own cgroup: <parent>/<node>/<instance>
  uint32_t instance_pids_max = 4096;    // processes + threads per instance (cgroup pids.max)
  InstanceStart instance_start = InstanceStart::kZygote;
  uint32_t zygote_timeout_ms = 2000;  // a zygote's load or one fork longer than this: spawn
  // Compromised-function detection (README "Behaviour detection"): the behaviour probes and
  // the detector scoring every instance each interval against its function's baseline, learned
  // over its first detect_learn_intervals intervals (saved under <state_dir>/detect).
  bool detect = true;
  uint32_t detect_interval_ms = 5000;
  uint32_t detect_learn_intervals = 12;
  // true: the sys_enter probe attached all the time (syscalls by class, open paths, every
  // connect): every syscall of the node pays for it. false: not attached; exec, TCP connect,
  // CPU, fork and byte detection at no per-syscall cost, opens not seen. sampled: sys_enter
  // attached for detect_sample_percent of each interval (classes scaled up, open attempts in
  // the slice), successful opens through fanotify (README "Behaviour detection").
  DetectSyscalls detect_syscalls = DetectSyscalls::kSampled;
  uint32_t detect_sample_percent = 10;  // 1 to 100

  // FL checkpoints are written behind their commits; this holds the checkpoint of each new
  // version back so long (for tests of the crash window between a commit and its checkpoint;
  // 0 otherwise).
  uint32_t fl_checkpoint_delay_ms = 0;
  // Where the FL jobs this node is the top of keep their checkpoints (state, model, update
  // log): "" = <state_dir>/jobs; in a cluster, a directory every node mounts (a ReadWriteMany
  // volume on Kubernetes), so another node can take a lost top's jobs over from there.
  std::string checkpoint_dir;

  // Cluster mode (README "Cluster"): etcd's client URLs, comma-separated ("" = standalone).
  // The node registers under /shoal/<cluster>/nodes/<node_name> with a lease it renews; other
  // nodes reach its gateway at advertise_host (default: listen_host, or the first non-loopback
  // IPv4 address when that is 0.0.0.0).
  std::string etcd;
  std::string cluster = "default";
  std::string advertise_host;
  uint32_t node_lease_ttl_s = 10;
  // A request forwarded to another node fails with 504 when that node sends nothing for this
  // long (a partitioned node drops packets silently; TCP alone would wait many minutes).
  double forward_timeout_s = 60.0;
  // FL across nodes (LIFL's hierarchy): an update entering this node for a job whose top is on
  // another node is folded here and the top gets one partial sum per round from this node, over
  // the nodes' FL peer links on fl_peer_port (same port on every node). false: such updates are
  // forwarded to the top's node whole (the central layout).
  bool fl_hierarchy = true;
  uint16_t fl_peer_port = 8082;

  // Loads `path` (YAML). Unknown keys are errors that name the key.
  static Result<NodeConfig> LoadFile(const std::string& path);
  static Result<NodeConfig> LoadString(const std::string& yaml);
  std::string ToYaml() const;
};

}  // namespace shoal
