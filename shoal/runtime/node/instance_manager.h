// The instance manager: shoald's reconciler for function instances on this node. It keeps
// each deployed function between its min and max scale, starts instances when requests queue
// (scale from zero, measuring the cold start), restarts crashed ones with back-off, drains and
// stops idle ones after their keep-alive, reclaims a dead instance's pool buffers, and
// collects instances' logs. A function whose manifest names an autoscaling policy (kpa, rl-q,
// shoal) is sized by that policy every autoscale interval (the same objects the simulator
// runs); the others by the reactive rule (what the requests present need). Every instance
// start is placed through the autoscaler's Place() over a one-node model of this node, so a
// function whose resources the node cannot give is refused (503, `unschedulable: ...`). It runs on
// shoald's main libuv loop.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/common/config.h"
#include "shoal/common/load_report.h"
#include "shoal/control/placement/placement.h"
#include "shoal/dataplane/channel/dataplane.h"
#include "shoal/dataplane/pool/pool_backend.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/interfaces/function_spec.h"
#include "shoal/interfaces/runtime_view.h"
#include "shoal/runtime/node/function_runtime.h"
#include "shoal/runtime/node/instance_observer.h"
#include "shoal/runtime/node/node_metrics.h"

namespace shoal {

struct FunctionSignals;  // shoal/control/autoscaler/signals.h

class ChildProcess;
class InstanceCgroup;

class CgroupHierarchy;
class TenantIds;

class InstanceManager final : public ScaleSignal, public RuntimeView {
 public:
  using SpecSource = std::function<std::vector<FunctionSpec>()>;

  InstanceManager(const NodeConfig& config, uv_loop_t* loop, DataPlane& dataplane,
                  FunctionTable& functions, NodeMetrics& metrics, SpecSource specs);
  ~InstanceManager() override;

  // Opens the manager's data-plane endpoint and starts reconciling. `sink` is the gateway.
  Status Start(RequestSink* sink);
  // The tenant's shared-memory pool, created (or taken over after a crash) on first use; the
  // FL coordinator re-opens its held updates through it after a restart.
  Result<SharedPool*> TenantPool(const std::string& tenant);
  // Stops every instance (SIGTERM, then SIGKILL after `grace_s`) and closes the handles.
  void Stop(double grace_s = 3.0);

  // The gateway's URL, given to instances as SHOAL_GATEWAY (inference handlers fetch FL models
  // from it). Set once the gateway listens, before the loop runs.
  void SetGatewayUrl(std::string url) { gateway_url_ = std::move(url); }
  // A bearer token for an instance that calls the gateway's authenticated routes (SHOAL_TOKEN
  // in its environment); "" = none. Called on the manager's thread at each instance start.
  void SetInstanceToken(std::function<std::string(const FunctionSpec&)> source) {
    instance_token_ = std::move(source);
  }

  // Who else watches instances start and go (the compromise detector); set before Start.
  void SetObserver(InstanceObserver* observer) { observer_ = observer; }
  // Called on the manager's thread with each autoscaled function's signals of the interval
  // just decided (cluster mode: the leader's cluster-wide autoscaler sums them); set before
  // Start, and cheap.
  void SetSignalSink(std::function<void(const FunctionSpec&, const FunctionSignals&)> sink) {
    signal_sink_ = std::move(sink);
  }
  // Quarantines instance `key` (the detector found it compromised; on the loop's thread):
  // no new requests, its in-flight ones answered 503 with `reason`, its processes frozen
  // (cgroup freezer) and kept until the function goes, and a clean instance started in its
  // place. An error when it is not a ready instance or cannot be frozen (then it is stopped).
  Status Quarantine(uint32_t key, const std::string& reason);
  // "v1" or "v2": the cgroup hierarchy instances run in; "" when they run without cgroups.
  std::string CgroupVersion() const;

  // FL job `job` committed `version` on this node (the coordinator's commit hook; any thread,
  // cheap): the ready instances of every function that follows the job (its handler's
  // SHOAL_INFER_FL_JOB) get a kJobCommitted descriptor, sent from the manager's loop
  // (instance_notices.cc).
  void JobCommitted(const std::string& job, uint64_t version);
  // ScaleSignal: requests are queueing; reconcile now (scale from zero).
  void Poke() override;

  // RuntimeView (any thread).
  void FunctionsChanged() override;
  FunctionStats Stats(const std::string& function) override;
  LogChunk Logs(const std::string& function, uint64_t offset, uint64_t max_bytes) override;
  std::string DataPlaneMode() override;
  std::vector<TenantPoolInfo> Pools() override;

  // Sets the gauges of the node's metrics from live state (called before each scrape).
  void RefreshMetrics();
  bool Ready() const { return started_; }

 private:
  struct Instance;
  struct FunctionState;

  void Reconcile();
  void SyncSpecs();
  void ScaleFunction(FunctionState& f, uint64_t now_ns);
  // Samples the function's signals and runs its autoscaling policy (every autoscale interval).
  void Decide(FunctionState& f, uint64_t now_ns);
  Status Spawn(FunctionState& f, bool prewarm = false);
  // The environment every instance of `spec` gets (the per-instance SHOAL_ENDPOINT/SHOAL_SLOT
  // apart), with `handler` as SHOAL_HANDLER.
  std::vector<std::string> InstanceEnv(const FunctionSpec& spec, const std::string& handler);
  // Keeps the function's zygote running (instance_start: zygote): starts it, notices its
  // death and restarts it with the crash back-off.
  void EnsureZygote(FunctionState& f, uint64_t now);
  // Reaps exited children of shoald that are no instance or zygote (processes an instance left
  // behind, re-parented to shoald as the child subreaper).
  void ReapStrays();
  // Starts `inst` forked from f's zygote: the child is checked, put in its cgroup and
  // released. The spare brings the cgroup it was moved into when forked (*cgroup becomes that
  // one); a child forked now is moved into *cgroup (made here, named `cgroup_name`, when
  // null). On error *refuse says the handler cannot load (answer the error) rather than that
  // the zygote path is unavailable now (spawn instead; the error says why).
  Status ForkFromZygote(FunctionState& f, Instance& inst, int out_fd, int err_fd,
                        std::unique_ptr<InstanceCgroup>* cgroup, const std::string& cgroup_name,
                        ChildProcess* child, bool* refuse);
  // Forks f's next child ahead of demand (f.spare), in a cgroup of its own.
  Status ForkSpare(FunctionState& f);
  // A cgroup `name` with spec's limits; null (logged) when cgroups are off or it cannot be made.
  std::unique_ptr<InstanceCgroup> NewInstanceCgroup(const FunctionSpec& spec,
                                                    const std::string& name);
  // The wait status of an exited instance forked from a zygote (its parent, which reports it):
  // 1 and *status, 0 when not known yet, -1 when it cannot be known (its zygote died first).
  int ZygoteExitStatus(Instance& inst, int* status);
  // Places one new instance of `f` on this node (Place() over cluster_) and reserves its
  // resources; on refusal records why in f.unschedulable, warns once per change and answers
  // the function's waiting requests 503 with the reason.
  bool PlaceStart(FunctionState& f);
  void StopInstance(Instance& inst);
  void OnReady(uint32_t key);
  void OnLoadReport(uint32_t key, const LoadReport& report);
  // The function's instances' last load reports, summed (mu_ held).
  static LoadReport LoadOf(const FunctionState& f);
  void OnExit(Instance* inst, int64_t status, int signal);
  // Logs the syscall of each instance the seccomp filter killed (from the kernel's log).
  void LogSeccompKills(uint64_t now_ns);
  void OnManagerReadable();
  // Sends the commits JobCommitted queued to the instances that follow their jobs (loop).
  void SendCommitNotices();
  void Retire(FunctionState& f, const char* why);
  void AppendLog(Instance& inst, const char* data, size_t len);
  Result<SharedPool*> PoolFor(const std::string& tenant);
  // The instance sandbox's start-up: tenant ids, cgroups, the handler directories (logged).
  Status StartSandbox();
  std::string gateway_url_;
  std::function<std::string(const FunctionSpec&)> instance_token_;
  InstanceObserver* observer_ = nullptr;
  std::function<void(const FunctionSpec&, const FunctionSignals&)> signal_sink_;
  std::string LogPath(const std::string& function) const;

  const NodeConfig& config_;
  uv_loop_t* loop_;
  DataPlane& dataplane_;
  FunctionTable& functions_;
  NodeMetrics& metrics_;
  SpecSource specs_;
  RequestSink* sink_ = nullptr;
  std::string fn_binary_;
  // The instance sandbox (shoal/sandbox): null cgroups_ when no hierarchy can be written;
  // switch_ids_ false when shoald is not root (instances then run as shoald's own uid).
  std::unique_ptr<CgroupHierarchy> cgroups_;
  uint32_t spare_cgroups_ = 0;  // names the spares' cgroups: <function>-s<n>
  // {zygote pid, child pid} -> wait status, as the zygotes report their children's exits.
  std::map<std::pair<int, int>, int> zygote_exits_;
  std::unique_ptr<TenantIds> tenant_ids_;
  std::vector<std::string> handler_dirs_;
  bool switch_ids_ = false;

  uv_timer_t tick_{};
  uv_async_t poke_{};
  uv_async_t commit_notices_{};  // JobCommitted -> SendCommitNotices on the loop
  uv_poll_t manager_poll_{};
  std::unique_ptr<DescriptorChannel> manager_channel_;
  Endpoint manager_endpoint_;
  bool started_ = false;
  bool stopping_ = false;
  std::atomic<bool> specs_changed_{true};

  mutable std::mutex mu_;  // guards everything below against RuntimeView readers
  std::map<std::string, std::unique_ptr<FunctionState>> by_name_;
  std::vector<std::unique_ptr<FunctionState>> retired_;  // draining old generations
  std::map<uint32_t, Instance*> by_key_;
  std::map<std::string, std::unique_ptr<SharedPool>> pools_;  // by tenant
  PoolBackendChoice pool_choice_;                             // config `pool`, resolved
  std::map<std::string, std::string> pool_reasons_;           // by tenant: why its backend
  // Tenants whose pool pool_prefault allocated whole: their instances populate their own
  // mapping (SHOAL_POOL_POPULATE).
  std::map<std::string, bool> pool_prefaulted_;
  std::map<std::string, uint64_t> used_slots_;  // by tenant: holder-slot bitmap
  // Commits not yet told to the instances (job -> newest version), by JobCommitted.
  std::map<std::string, uint64_t> commits_to_tell_;
  uint64_t commit_notices_sent_ = 0;
  uint32_t next_sequence_ = 1;
  struct SeccompKill {
    std::string function;
    uint32_t key;
    int pid;
    uint64_t at_ns;
  };
  std::vector<SeccompKill> seccomp_kills_;  // SIGSYS exits whose syscall is still to be logged
  // This node as placement sees it: capacity, the resources running instances hold, functions
  // started here before (cached), idle warm instances and the mean measured cold start.
  ClusterModel cluster_;
  double cold_start_sum_s_ = 0;
  uint64_t cold_start_count_ = 0;
};

}  // namespace shoal
