// shoald's FL part of cluster mode: LIFL's hierarchy across nodes. Every node serves the FL
// peer links (fl_peer.h). As a job's top, a node admits the updates other nodes received (on
// their header and the client's bearer token, checked against its token store), counts them
// when their node reports them folded and durable, and fetches each such node's one partial
// sum of a round before committing it. As a member, a node folds the updates its gateway
// receives for a job whose top is elsewhere (FlCoordinator::FoldFor, from the nodes' records:
// a node that runs a job lists it). A node whose lease expires is lost: its tops un-count what
// it held and had not sent, so that those clients send again.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>

#include "shoal/control/cluster/fl_peer.h"
#include "shoal/control/cluster/node_agent.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/security/auth/token_store.h"

namespace shoal::cluster {

class ClusterFl final : public FlTopLink {
 public:
  ClusterFl(const NodeConfig& config, FlCoordinator& fl, auth::TokenStore& tokens,
            NodeAgent& agent);
  ~ClusterFl() override;
  // Jobs the controller manages (ManagedFlJobs): a lost top's are moved by the controller, not
  // taken over by the nodes' own rule. Set before Start.
  void SetManaged(std::function<bool(const std::string& job)> managed) {
    managed_ = std::move(managed);
  }
  Status Start();
  // For /metrics: the peer links refused by their handshake.
  std::string MetricsText() const;
  // Before the coordinator and the agent go: no call reaches them after this returns.
  void Stop();

  // FlTopLink (this node as a member).
  Result<Admission> Admit(const std::string& top, const std::string& job, std::string_view bearer,
                          std::span<const std::byte> head, uint64_t key) override;
  void Report(const std::string& top, const std::string& job, uint64_t ticket, bool ok) override;

 private:
  FlPeerReply Handle(FlPeerCall call, const std::string& json, std::span<const std::byte> payload);
  Status FetchPartial(const std::string& node, const std::string& job, uint64_t round,
                      const std::vector<uint64_t>& tickets, std::vector<float>* sum);
  Result<std::vector<uint64_t>> Probe(const std::string& node, const std::string& job,
                                      const std::vector<uint64_t>& keys);
  // The live nodes' peer addresses (refreshed by WatchLoop; Allow refreshes on a miss).
  std::string PeerOf(const std::string& node);
  // The cluster's peer secret from etcd, for the links' handshake (tried again by WatchLoop
  // until it succeeds).
  bool LoadSecret();
  bool have_secret_ = false;  // WatchLoop's (and Start's, before it runs)
  bool secret_warned_ = false;
  void RefreshNodes();
  void WatchLoop();
  void ReportLoop();

  const NodeConfig& config_;
  FlCoordinator& fl_;
  auth::TokenStore& tokens_;
  NodeAgent& agent_;
  std::function<bool(const std::string&)> managed_;
  FlPeerServer server_;
  FlPeerClient client_;

  std::mutex nodes_mu_;
  std::map<std::string, std::string> peers_;  // live node -> "ip:fl_peer_port"
  std::set<std::string> peer_ips_;

  // Reports to tops, sent in order by ReportLoop (batched per top), retried until the top
  // takes them or is lost.
  struct PendingReport {
    std::string top, job;
    uint64_t ticket;
    bool ok;
  };
  std::mutex report_mu_;
  std::condition_variable report_cv_;
  std::deque<PendingReport> reports_;
  bool stopping_ = false;
  std::thread reporter_, watcher_;
  // The commit thread's fetches stop reaching this object once Stop() cleared it. Shared by
  // the calls (the top fetches its members' partial sums on a thread per node, side by side;
  // a plain mutex held across each call made them one after another), exclusive for Stop().
  struct Gate {
    std::shared_mutex mu;
    ClusterFl* self = nullptr;
  };
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
};

}  // namespace shoal::cluster
