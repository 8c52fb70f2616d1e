// shoal-controller's --kubernetes flags and the operator they make: the KubernetesOperator over
// the Shoal cluster (ClusterBackend), started while this controller leads.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "shoal/control/kubernetes/cluster_backend.h"
#include "shoal/control/kubernetes/operator.h"

namespace shoal::kubernetes {

struct KubernetesFlags {
  bool enabled = false;
  std::string api, token_file, ca_file;
  OperatorOptions options;
};

void AddKubernetesFlags(CLI::App& app, KubernetesFlags* flags);

class ClusterOperator {
 public:
  // kInvalidArgument naming what is missing (no API server address, no token).
  static Result<std::unique_ptr<ClusterOperator>> Create(
      const KubernetesFlags& flags, cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
      cluster::ClusterTokens* tokens, cluster::NodeDirectory* nodes,
      controller::ClusterFunctions* functions, controller::ClusterFlJobs* jobs);
  void Start() { operator_.Start(); }
  void Stop() {
    operator_.Stop();
    backend_.Close();
  }

 private:
  ClusterOperator(KubeConfig config, const KubernetesFlags& flags, cluster::EtcdClient* etcd,
                  cluster::ClusterKeys keys, cluster::ClusterTokens* tokens,
                  cluster::NodeDirectory* nodes, controller::ClusterFunctions* functions,
                  controller::ClusterFlJobs* jobs)
      : backend_(etcd, std::move(keys), tokens, nodes, functions, jobs),
        operator_(KubeClient(std::move(config)), &backend_, flags.options) {}
  ClusterBackend backend_;
  KubernetesOperator operator_;
};

}  // namespace shoal::kubernetes
