// shoal-controller's Kubernetes operator (--kubernetes): the FLJob and Function custom resources
// (deploy/k8s/core/crds.yaml) are listed and watched through the API server (list, then watch
// from the list's resourceVersion; re-listed on 410 Gone, on a broken watch and every resync),
// each new generation is deployed into the Shoal cluster as `shoal deploy` would (a manifest
// error becomes a Failed condition with the parser's message), a deleted resource's job or
// function is deleted, and the status subresource follows the Shoal state (an FLJob's version,
// accuracy and clients; a Function's ready and desired instances) with Ready, Progressing and
// Failed conditions. Runs on its own threads, on the leader only (Start/Stop).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/control/kubernetes/kube_client.h"
#include "shoal/control/kubernetes/resource_status.h"

namespace shoal::kubernetes {

// Where the resources go: the Shoal cluster (ClusterBackend), or a test's stand-in.
class OperatorBackend {
 public:
  virtual ~OperatorBackend() = default;
  // Deploys one manifest document of `kind`; kInvalidArgument for the user's mistakes.
  virtual Status Apply(const std::string& kind, const std::string& manifest) = 0;
  virtual Status Delete(const std::string& kind, const std::string& name) = 0;  // kNotFound
  virtual bool Exists(const std::string& kind, const std::string& name) = 0;
  // The names of `kind` this operator deployed and has not deleted (kept where a restarted
  // controller finds them): one no longer listed was deleted while no operator watched.
  virtual std::vector<std::string> Managed(const std::string& kind) = 0;
  // Fills the Shoal side of `observed` (job status, instances).
  virtual void Observe(const std::string& kind, const std::string& name, Observed* observed) = 0;
};

struct OperatorOptions {
  int resync_s = 300;             // a full re-list at least this often
  int watch_timeout_s = 60;       // one watch request's length (the server ends it)
  int status_interval_ms = 2000;  // how often the Shoal state is copied into the statuses
};

class KubernetesOperator {
 public:
  KubernetesOperator(KubeClient client, OperatorBackend* backend, OperatorOptions options);
  ~KubernetesOperator();
  KubernetesOperator(const KubernetesOperator&) = delete;
  KubernetesOperator& operator=(const KubernetesOperator&) = delete;

  void Start();  // idempotent
  void Stop();   // within about a second (a watch in flight is cancelled)

 private:
  struct Tracked {
    std::string kind, ns, name;
    int64_t generation = 0;
    Observed observed;
    nlohmann::json resource;  // as the API server last sent it
    nlohmann::json status;    // as the API server has it (or as last written)
    bool retry = false;       // the deploy failed for a reason that may pass (no node yet)
  };
  void RunKind(const ResourceKind& kind);
  void RunStatus();
  void Reconcile(const ResourceKind& kind, const nlohmann::json& resource);
  void Deleted(const ResourceKind& kind, const std::string& name);
  void Deploy(const ResourceKind& kind, const nlohmann::json& resource, Tracked* t);
  void WriteStatus(const ResourceKind& kind, Tracked* t);  // under mu_
  bool Sleep(int ms);                                      // false when stopping

  KubeClient client_;
  OperatorBackend* backend_;
  OperatorOptions options_;
  std::vector<ResourceKind> kinds_;
  std::mutex mu_;
  std::map<std::string, Tracked> tracked_;  // "<kind>/<name>" (Shoal names are cluster-wide)
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  std::vector<std::thread> threads_;
};

}  // namespace shoal::kubernetes
