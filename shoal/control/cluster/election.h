// Leader election among shoal-controllers: the leader holds <prefix>/leader under its lease.
// Candidates poll for the key to vanish (its holder resigned, or died and its lease ran out)
// and take it with a create-if-absent transaction, so at most one holds it at a time. A leader
// that cannot renew its lease for a TTL steps down on its own before another can take over.
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

namespace shoal::cluster {

struct ElectionOptions {
  int64_t lease_ttl_s = 5;
  std::chrono::milliseconds poll{300};
};

class LeaderElection {
 public:
  using ChangeFn = std::function<void(bool leader)>;
  LeaderElection(EtcdClient* etcd, std::string key, std::string identity,
                 ElectionOptions options = {}, ChangeFn on_change = {});
  // Stops campaigning; a leader resigns (deletes its key, revokes its lease).
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  void Start();
  // Stops without resigning: the key stays until the lease runs out, as after a crash.
  void Abandon();

  bool is_leader() const { return leader_.load(); }
  // The identity holding the key when last seen ("" when none).
  std::string leader() const;
  const std::string& identity() const { return identity_; }

 private:
  void Campaign();
  void SetLeader(bool leader);
  bool WaitStop(std::chrono::milliseconds d);

  EtcdClient* etcd_;
  std::string key_;
  std::string identity_;
  ElectionOptions options_;
  ChangeFn on_change_;
  std::atomic<bool> leader_{false};
  mutable std::mutex mu_;
  std::string seen_leader_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  bool resign_ = true;
  std::thread thread_;
};

}  // namespace shoal::cluster
