// The operator's backend in shoal-controller: custom resources deployed into the Shoal cluster
// through the same calls as POST /v1/functions (ParseManifests, then ClusterFunctions or
// ClusterFlJobs), and their Shoal state read back: an FL job's published status from etcd, a
// function's desired instances from its placements and its ready ones from the nodes placed to
// run it (their /v1/functions/<name>, asked with a viewer token of the cluster that the
// backend makes when it first needs it and revokes on Close). What it deployed is remembered in
// etcd (<prefix>/kubernetes/<kind>/<name>), so a restarted controller deletes what was deleted
// while none ran.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "shoal/control/cluster/cluster_tokens.h"
#include "shoal/control/cluster/node_directory.h"
#include "shoal/control/controller/cluster_fl_jobs.h"
#include "shoal/control/controller/cluster_functions.h"
#include "shoal/control/kubernetes/operator.h"

namespace shoal::kubernetes {

class ClusterBackend : public OperatorBackend {
 public:
  ClusterBackend(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                 cluster::ClusterTokens* tokens, cluster::NodeDirectory* nodes,
                 controller::ClusterFunctions* functions, controller::ClusterFlJobs* jobs)
      : etcd_(etcd),
        keys_(std::move(keys)),
        tokens_(tokens),
        nodes_(nodes),
        functions_(functions),
        jobs_(jobs) {}
  ~ClusterBackend() override { Close(); }
  void Close();  // revokes the viewer token, if one was made

  Status Apply(const std::string& kind, const std::string& manifest) override;
  Status Delete(const std::string& kind, const std::string& name) override;
  bool Exists(const std::string& kind, const std::string& name) override;
  std::vector<std::string> Managed(const std::string& kind) override;
  void Observe(const std::string& kind, const std::string& name, Observed* observed) override;

 private:
  // <prefix>/kubernetes/<kind>/<name>: what the operator deployed (Managed).
  std::string ManagedKey(const std::string& kind, const std::string& name = "") const {
    return keys_.prefix() + "/kubernetes/" + kind + "/" + name;
  }
  cluster::EtcdClient* etcd_;
  cluster::ClusterKeys keys_;
  cluster::ClusterTokens* tokens_;
  cluster::NodeDirectory* nodes_;
  std::mutex mu_;
  std::string token_id_, authorization_;  // the viewer token's id and "Bearer ..." (under mu_)
  controller::ClusterFunctions* functions_;
  controller::ClusterFlJobs* jobs_;
};

}  // namespace shoal::kubernetes
