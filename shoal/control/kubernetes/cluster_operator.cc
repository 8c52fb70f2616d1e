#include "shoal/control/kubernetes/cluster_operator.h"

namespace shoal::kubernetes {

void AddKubernetesFlags(CLI::App& app, KubernetesFlags* f) {
  app.add_flag("--kubernetes", f->enabled,
               "operate the FLJob and Function custom resources (shoal.dev/v1) through the "
               "Kubernetes API server (the leader only)");
  app.add_option("--kube-api", f->api,
                 "the API server's URL (default: the pod's, from KUBERNETES_SERVICE_HOST)");
  app.add_option("--kube-token-file", f->token_file,
                 "a bearer token file (default: the pod's service-account token)");
  app.add_option("--kube-ca", f->ca_file,
                 "the API server's CA (PEM; default: the service account's ca.crt)");
  app.add_option("--kube-resync", f->options.resync_s,
                 "seconds between full re-lists of the custom resources")
      ->check(CLI::Range(1, 86400));
  app.add_option("--kube-status-interval-ms", f->options.status_interval_ms,
                 "how often the custom resources' status follows the Shoal state")
      ->check(CLI::Range(100, 600000));
}

Result<std::unique_ptr<ClusterOperator>> ClusterOperator::Create(
    const KubernetesFlags& flags, cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
    cluster::ClusterTokens* tokens, cluster::NodeDirectory* nodes,
    controller::ClusterFunctions* functions, controller::ClusterFlJobs* jobs) {
  auto config = KubeConfig::Resolve(flags.api, flags.token_file, flags.ca_file);
  if (!config.ok()) return config.status();
  return std::unique_ptr<ClusterOperator>(new ClusterOperator(
      std::move(*config), flags, etcd, std::move(keys), tokens, nodes, functions, jobs));
}

}  // namespace shoal::kubernetes
