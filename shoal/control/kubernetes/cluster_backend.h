// The operator's backend in shoal-controller: custom resources deployed into the Shoal cluster
// through the same calls as POST /v1/functions (ParseManifests, then ClusterFunctions or
// ClusterFlJobs), and their Shoal state read back from etcd (an FL job's published status, a
// function's placements and its nodes' signals).
#pragma once

#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/controller/cluster_fl_jobs.h"
#include "shoal/control/controller/cluster_functions.h"
#include "shoal/control/kubernetes/operator.h"

namespace shoal::kubernetes {

class ClusterBackend : public OperatorBackend {
 public:
  ClusterBackend(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                 controller::ClusterFunctions* functions, controller::ClusterFlJobs* jobs)
      : etcd_(etcd), keys_(std::move(keys)), functions_(functions), jobs_(jobs) {}

  Status Apply(const std::string& kind, const std::string& manifest) override;
  Status Delete(const std::string& kind, const std::string& name) override;
  bool Exists(const std::string& kind, const std::string& name) override;
  void Observe(const std::string& kind, const std::string& name, Observed* observed) override;

 private:
  cluster::EtcdClient* etcd_;
  cluster::ClusterKeys keys_;
  controller::ClusterFunctions* functions_;
  controller::ClusterFlJobs* jobs_;
};

}  // namespace shoal::kubernetes
