// shoald's side of cluster mode: connects to etcd, registers the node (NodeMembership), runs the
// cluster functions placed here (PlacedFunctions), keeps the table the gateway forwards requests
// by (PeerRoutes over the NodeDirectory) and reports how that stands for /readyz and /metrics. The
// data path never waits on it: an etcd outage is logged and retried while the node keeps serving.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "shoal/common/config.h"
#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/membership.h"
#include "shoal/control/cluster/node_directory.h"
#include "shoal/control/cluster/node_signals.h"
#include "shoal/control/cluster/peer_routes.h"
#include "shoal/control/cluster/placed_functions.h"

namespace shoal::cluster {

class NodeAgent {
 public:
  // Refused (nothing registered) on bad endpoints, a name held by a live node elsewhere, or a
  // cluster speaking another protocol; an unreachable etcd is not refused (logged, retried).
  // `on_functions` runs (on a watch thread) when the cluster functions placed here change;
  // `model_of` names the OIP model a function serves (forwarding of /v2/models/{model}).
  static Result<std::unique_ptr<NodeAgent>> Start(const NodeConfig& config, NodeRecord record,
                                                  std::function<void()> on_functions = {},
                                                  PeerRoutes::ModelOf model_of = {});
  ~NodeAgent();  // leaves the cluster (revokes the lease: the record vanishes at once)

  // Revokes the lease now (the record vanishes) after stopping the record's updates; the
  // placement watches stay until destruction.
  void Leave();
  MembershipState state() const { return membership_->state(); }
  std::string detail() const { return membership_->detail(); }
  // One line for /readyz: "etcd: registered ..." or "etcd: disconnected: <why>".
  std::string StatusLine() const;
  // Prometheus text: shoal_cluster_etcd_connected, shoal_cluster_etcd_calls_total,
  // shoal_cluster_etcd_failures_total, shoal_cluster_etcd_latency_seconds.
  std::string MetricsText() const;
  EtcdClient& etcd() { return *etcd_; }
  // The cluster functions placed on this node, with its share of their scale.
  std::vector<PlacedFunction> Placed() const { return placed_->List(); }
  const ClusterKeys& keys() const { return membership_->keys(); }
  // Where the gateway forwards a request for a function that is not on this node.
  PeerRoutes& routes() { return *routes_; }
  // The live nodes' records (this one included), from the directory's watch.
  std::vector<NodeEntry> Nodes() const { return nodes_->List(); }
  // What the node publishes about itself beyond its start-up record (the FL jobs it runs):
  // `fill` edits a copy of the record, on the agent's own thread, after each Refresh().
  void SetRecordSource(std::function<void(NodeRecord*)> fill);
  // Any thread, never blocks: the record is filled and rewritten in etcd soon.
  void Refresh();
  // A cluster function's latest autoscaling signals on this node (the instance manager's
  // thread, every control interval); published under the node's lease every 2 s for the
  // leader's cluster-wide autoscaler.
  void OfferSignals(const std::string& function, const NodeSignals& signals);

 private:
  NodeAgent() = default;
  std::unique_ptr<EtcdClient> etcd_;
  std::unique_ptr<NodeMembership> membership_;
  std::unique_ptr<PlacedFunctions> placed_;
  std::unique_ptr<NodeDirectory> nodes_;
  std::unique_ptr<PeerRoutes> routes_;
  // The watches rebuild the routes only while both their sources are alive (cleared first on
  // destruction: each watch reads the other's source).
  void RebuildRoutes();
  std::mutex routes_mu_;
  bool routes_live_ = true;
  // Rewrites the record when Refresh() asked, and looks again every 10 s (a failed write is
  // tried again then).
  void RecordLoop();
  void StopRecorder();
  std::thread recorder_;
  std::mutex record_mu_;
  std::condition_variable record_cv_;
  std::function<void(NodeRecord*)> fill_;
  bool record_dirty_ = false;
  int idle_ticks_ = 0;
  // Offered signals not yet published (the publisher runs on the recorder's thread).
  std::map<std::string, NodeSignals> signals_;
  void PublishSignals();
  // Starts the placement and node watches, retrying with back-off while etcd is away.
  std::thread starter_;
  std::atomic<bool> stop_{false};
};

// The etcd key prefix of a cluster name: "/shoal/<cluster>".
std::string ClusterPrefix(const std::string& cluster);
// The address other nodes reach this one at: advertise_host, else listen_host, else (listen_host
// 0.0.0.0) the first non-loopback IPv4 address of the node's interfaces.
std::string AdvertiseHost(const NodeConfig& config);

}  // namespace shoal::cluster
