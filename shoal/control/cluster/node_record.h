// What a node says about itself in the cluster (<prefix>/nodes/<name>, bound to the node's
// lease): where its gateway is, what it has, what a cold start costs there. The leader's
// placement reads these; `shoal get nodes` prints them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::cluster {

// The cluster protocol this build speaks. A node whose major differs from the cluster's is
// refused at registration.
inline constexpr int kClusterProtocolMajor = 1;
inline constexpr int kClusterProtocolMinor = 0;

struct NodePool {
  std::string tenant;
  std::string backend;  // boost | dpdk
  uint64_t bytes = 0;
};

struct NodeRecord {
  std::string name;
  std::string address;  // host:port of the node's gateway (data path, forwarding)
  std::string control;  // URL of its control API (http(s)://host:port; "" when unknown)
  int protocol_major = kClusterProtocolMajor;
  int protocol_minor = kClusterProtocolMinor;
  std::string version;  // shoald's version string
  uint32_t cores = 0;
  uint64_t memory_mib = 0;
  uint32_t gpus = 0;
  double cold_start_ms = 0;                   // measured spawn → ready, p50
  std::vector<std::string> cached_functions;  // functions with a warm zygote or instance
  std::vector<std::string> fl_jobs;  // FL jobs this node runs (other gateways forward to it)
  std::vector<NodePool> pools;
  int64_t started_unix_ms = 0;

  std::string ToJson() const;
  // Refuses a record with a missing or mistyped field, naming it.
  static Result<NodeRecord> FromJson(const std::string& text);
};

// The key layout of one cluster in etcd (DESIGN.md, "The cluster").
class ClusterKeys {
 public:
  // `prefix` like "/shoal/prod"; a trailing '/' is dropped.
  explicit ClusterKeys(std::string prefix);
  const std::string& prefix() const { return prefix_; }
  std::string Node(const std::string& name) const { return prefix_ + "/nodes/" + name; }
  std::string Nodes() const { return prefix_ + "/nodes/"; }
  std::string Function(const std::string& name) const { return prefix_ + "/functions/" + name; }
  std::string Functions() const { return prefix_ + "/functions/"; }
  // FL jobs deployed through the controller (FlJobRecord) and each one's small state, as its
  // top publishes it after its commits (version, round, counts).
  std::string Job(const std::string& name) const { return prefix_ + "/jobs/" + name; }
  std::string Jobs() const { return prefix_ + "/jobs/"; }
  std::string JobState(const std::string& name) const { return prefix_ + "/job-state/" + name; }
  std::string JobStates() const { return prefix_ + "/job-state/"; }
  // The cluster's bearer tokens (hashed records, as tokens.json holds them), which the
  // controllers issue and every node and controller accepts.
  std::string Token(const std::string& id) const { return prefix_ + "/tokens/" + id; }
  std::string Tokens() const { return prefix_ + "/tokens/"; }
  std::string AdminBootstrap() const { return prefix_ + "/admin-bootstrap"; }
  std::string PeerSecret() const { return prefix_ + "/peer-secret"; }  // fl_peer.h's handshake
  std::string Placements(const std::string& fn) const {
    return prefix_ + "/placements/" + fn + "/";
  }
  std::string Leader() const { return prefix_ + "/leader"; }
  std::string Signals(const std::string& fn) const { return prefix_ + "/signals/" + fn + "/"; }
  std::string AllSignals() const { return prefix_ + "/signals/"; }
  std::string Version() const { return prefix_ + "/version"; }

 private:
  std::string prefix_;
};

// A node name is a DNS label (Kubernetes node names are): 1–63 of [a-z0-9-], not starting or
// ending with '-'.
Status ValidateNodeName(const std::string& name);

}  // namespace shoal::cluster
