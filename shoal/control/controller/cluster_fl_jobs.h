// The cluster's FL jobs as the controller deploys them: each FLJob manifest becomes an etcd
// record (<prefix>/jobs/<name>, cluster::FlJobRecord) naming the node chosen as the job's top
// (the one that runs its coordinator; every other node folds the updates entering it for that
// top, LIFL's hierarchy across nodes). The top publishes the job's small state
// (<prefix>/job-state/<name>), which is the job's status here. The leader moves a job whose top
// left the cluster to a live node, which resumes it from the shared checkpoint store.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shoal/control/cluster/dirty_loop.h"
#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/fl_job_record.h"
#include "shoal/control/cluster/node_directory.h"
#include "shoal/interfaces/fljob_spec.h"

namespace shoal::controller {

struct DeployedJob {
  cluster::FlJobRecord record;
  bool created = false;
};

struct ClusterJob {
  cluster::FlJobRecord record;
  std::optional<cluster::FlJobState> state;  // none until its top has published one
};

class ClusterFlJobs {
 public:
  ClusterFlJobs(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                cluster::NodeDirectory* nodes);
  ~ClusterFlJobs();

  // Writes each job (validated by the caller, all or nothing there) with its next generation;
  // a new job gets a top: the node with the most cores, then the fewest FL jobs, then by name.
  // A re-deploy keeps its top. kUnavailable when no node is registered.
  Result<std::vector<DeployedJob>> Deploy(const std::vector<FlJobSpec>& specs);
  Status Delete(const std::string& name);  // the record and its state; kNotFound
  Result<std::vector<ClusterJob>> List();
  Result<ClusterJob> Get(const std::string& name);  // kNotFound

  // Leader only: moves jobs whose top is not a live node, now and whenever nodes change.
  void StartMoving();
  void StopMoving();
  void NodesChanged();

 private:
  Status MoveAll();
  // The node a job goes to (the most cores, then the fewest FL jobs, then by name), "" when
  // none is live.
  std::string ChooseTop(const std::vector<cluster::NodeEntry>& nodes,
                        const std::string& except) const;
  cluster::EtcdClient* etcd_;
  cluster::ClusterKeys keys_;
  cluster::NodeDirectory* nodes_;
  cluster::DirtyLoop mover_;
};

}  // namespace shoal::controller
