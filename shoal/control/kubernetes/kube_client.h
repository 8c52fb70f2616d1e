// A small client of the Kubernetes API server for shoal-controller's operator, over Shoal's one
// HTTP client (libcurl): list a custom resource, watch it from a resourceVersion (the stream of
// JSON events, a 410 Gone told apart so the caller re-lists), and merge-patch its status
// subresource. Bearer token (re-read from its file on every call: projected service-account
// tokens rotate) and the cluster's CA. Every call blocks its caller: the operator's own threads.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "shoal/common/status.h"

namespace shoal::kubernetes {

struct KubeConfig {
  std::string server;      // https://host:port
  std::string token_file;  // a bearer token (a service account's)
  std::string ca_file;     // PEM of the API server's CA; "" for the system's
  // `server`, `token_file` and `ca_file` where given, else the pod's own: the service
  // account's files under /var/run/secrets/kubernetes.io/serviceaccount and
  // https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. kInvalidArgument naming what is
  // missing.
  static Result<KubeConfig> Resolve(std::string server, std::string token_file,
                                    std::string ca_file);
};

// A custom resource's collection: /apis/<group>/<version>/[namespaces/<ns>/]<plural>.
struct ResourceKind {
  std::string group = "shoal.dev";
  std::string version = "v1";
  std::string plural;  // fljobs
  std::string kind;    // FLJob
  std::string Path(const std::string& ns = "", const std::string& name = "") const;
};

struct ResourceList {
  nlohmann::json items = nlohmann::json::array();
  std::string resource_version;
};

struct WatchEnd {
  bool gone = false;             // 410: `from` is older than the server keeps: re-list
  std::string resource_version;  // the last event's (or bookmark's): watch on from here
};

class KubeClient {
 public:
  explicit KubeClient(KubeConfig config) : config_(std::move(config)) {}

  // Every object of `kind` in every namespace, and the list's resourceVersion.
  Result<ResourceList> List(const ResourceKind& kind) const;
  // Watches `kind` from `from` for at most `timeout_s` (the server ends it then), calling
  // `on_event(type, object)` for ADDED, MODIFIED and DELETED. Returns when the server ends the
  // watch, with 410 Gone, or within a second of `*cancel` turning true; a transport failure or
  // another HTTP error is an error status.
  Result<WatchEnd> Watch(
      const ResourceKind& kind, const std::string& from, int timeout_s,
      const std::function<void(const std::string&, const nlohmann::json&)>& on_event,
      const std::atomic<bool>* cancel) const;
  // Merge-patches the status subresource of ns/name to `status`; kNotFound when it is gone.
  Status PatchStatus(const ResourceKind& kind, const std::string& ns, const std::string& name,
                     const nlohmann::json& status) const;

  const KubeConfig& config() const { return config_; }

 private:
  Result<std::string> Token() const;
  KubeConfig config_;
};

}  // namespace shoal::kubernetes
