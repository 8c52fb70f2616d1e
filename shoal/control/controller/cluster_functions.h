// The cluster's functions in etcd, as the controller deploys them (<prefix>/functions/<name>),
// and the leader's placement of each over the registered nodes (<prefix>/placements/<fn>/<node>:
// the share of its scale a node runs): each instance of a function's max_scale goes through the
// simulator's Place() (cached code, cold-start cost, free resources) over a model of the nodes,
// oldest functions first. Placement reruns whenever a function or a node changes, so a lost
// node's share moves to the nodes that are left.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shoal/control/cluster/cluster_function.h"
#include "shoal/control/cluster/dirty_loop.h"
#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_directory.h"
#include "shoal/interfaces/function_spec.h"

namespace shoal::controller {

struct DeployedFunction {
  cluster::ClusterFunction function;
  bool created = false;
};

class ClusterFunctions {
 public:
  ClusterFunctions(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                   cluster::NodeDirectory* nodes);
  ~ClusterFunctions();

  // Validates every document (all or nothing), refuses a function no registered node can hold
  // (naming the resource), and writes each with its id and next generation.
  Result<std::vector<DeployedFunction>> Deploy(std::string_view manifests);
  Status Delete(const std::string& name);
  Result<std::vector<cluster::ClusterFunction>> List();
  // node -> placement of `function` as etcd has it now.
  Result<std::vector<std::pair<std::string, cluster::Placement>>> Placements(
      const std::string& function);

  // Leader only: place now and whenever functions or nodes change, until StopPlacing.
  void StartPlacing();
  void StopPlacing();
  void NodesChanged();  // from the node directory
  // The cluster-wide autoscaler's warm instances for `function` (its placements keep at least
  // this many across the nodes, within scale.min..scale.max); re-places when it changes.
  void SetWarm(const std::string& function, uint32_t warm);
  uint32_t Warm(const std::string& function);

 private:
  Status PlaceAll();
  cluster::EtcdClient* etcd_;
  cluster::ClusterKeys keys_;
  cluster::NodeDirectory* nodes_;
  std::mutex mu_;
  std::unique_ptr<cluster::EtcdWatch> watch_;  // under mu_
  std::map<std::string, uint32_t> warm_;       // under mu_
  cluster::DirtyLoop placer_;
};

}  // namespace shoal::controller
