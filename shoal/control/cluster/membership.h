// A node's membership in the cluster: its record under <prefix>/nodes/<name>, bound to a lease
// the node keeps alive. When the node dies (or is cut off) the lease expires and the record
// vanishes, which is how the leader learns of the loss. While etcd is unreachable the node keeps
// serving (nothing here blocks the data path) and re-registers when etcd is back.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_record.h"

namespace shoal::cluster {

enum class MembershipState {
  kJoining,       // not registered yet
  kRegistered,    // the record is in etcd and the lease renews
  kDisconnected,  // etcd does not answer; retrying with back-off (the node keeps serving)
  kConflict,      // the name is held by another live node; retrying in case it goes away
  kLeft,
};
const char* MembershipStateName(MembershipState s);

struct MembershipOptions {
  int64_t lease_ttl_s = 10;
  std::chrono::milliseconds max_backoff{2000};
};

class NodeMembership {
 public:
  using StateFn = std::function<void(MembershipState, const std::string& detail)>;
  NodeMembership(EtcdClient* etcd, ClusterKeys keys, NodeRecord record,
                 MembershipOptions options = {}, StateFn on_state = {});
  ~NodeMembership();  // stops renewing without revoking (the lease runs out: as a crash would)
  NodeMembership(const NodeMembership&) = delete;
  NodeMembership& operator=(const NodeMembership&) = delete;

  // Registers once, synchronously, and starts renewing. Refused (and nothing written) when the
  // cluster speaks another protocol major or a live node at another address holds the name;
  // kUnavailable when etcd does not answer (the caller may start anyway: the renewer retries).
  Status Join();
  // Replaces the record (cached functions, pools, cold-start cost changed).
  Status Update(NodeRecord record);
  NodeRecord record() const;
  // Revokes the lease: the record vanishes now (a clean shutdown).
  Status Leave();

  MembershipState state() const { return state_.load(); }
  std::string detail() const;
  int64_t lease() const { return lease_.load(); }
  const ClusterKeys& keys() const { return keys_; }

 private:
  Status CheckProtocol();
  Status Register();  // grant a lease and create the record (taking over our own stale one)
  void Renew();
  void SetState(MembershipState s, const std::string& detail);

  EtcdClient* etcd_;
  ClusterKeys keys_;
  MembershipOptions options_;
  StateFn on_state_;
  mutable std::mutex mu_;  // record_, detail_
  NodeRecord record_;
  std::string detail_;
  std::atomic<MembershipState> state_{MembershipState::kJoining};
  std::atomic<int64_t> lease_{0};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread renewer_;
};

}  // namespace shoal::cluster
