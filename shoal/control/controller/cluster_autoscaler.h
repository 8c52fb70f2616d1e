// The leader's cluster-wide autoscaler: every interval it sums the nodes' signals of each
// cluster function that names an autoscaling policy (<prefix>/signals/<fn>/<node>, published by
// each node under its lease), runs that function's FunctionAutoscaler (the same object a node
// or the simulator runs) on the sum with the function's cluster-wide scale, and hands the
// decision (replicas + pre-warm) to placement as the function's warm instances: the nodes keep
// at least that many ready between them, and each still scales its own share up to its max.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "shoal/control/autoscaler/function_autoscaler.h"
#include "shoal/control/cluster/dirty_loop.h"
#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_record.h"
#include "shoal/control/controller/cluster_functions.h"

namespace shoal::controller {

class ClusterAutoscaler {
 public:
  ClusterAutoscaler(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                    ClusterFunctions* functions, double interval_s = 2.0);
  ~ClusterAutoscaler();
  void Start();  // leader only
  void Stop();
  // Prometheus text: shoal_cluster_autoscaler_desired{function}, _signals_nodes{function}.
  std::string MetricsText();

 private:
  struct Fn {
    uint64_t generation = 0;
    std::unique_ptr<FunctionAutoscaler> autoscaler;
    uint32_t desired = 0;
    size_t nodes = 0;  // nodes whose signals the last decision summed
  };
  void Tick();
  cluster::EtcdClient* etcd_;
  cluster::ClusterKeys keys_;
  ClusterFunctions* functions_;
  const double interval_s_;
  std::mutex mu_;
  std::map<std::string, Fn> fns_;  // under mu_ (Tick runs on loop_'s thread alone)
  cluster::DirtyLoop loop_;        // a Tick every interval_s_, never poked
};

}  // namespace shoal::controller
