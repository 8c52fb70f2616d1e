#include "shoal/control/cluster/election.h"

#include <spdlog/spdlog.h>

#include "shoal/common/stop_signal.h"

namespace shoal::cluster {

using Clock = std::chrono::steady_clock;

LeaderElection::LeaderElection(EtcdClient* etcd, std::string key, std::string identity,
                               ElectionOptions options, ChangeFn on_change)
    : etcd_(etcd),
      key_(std::move(key)),
      identity_(std::move(identity)),
      options_(options),
      on_change_(std::move(on_change)) {}

LeaderElection::~LeaderElection() {
  SignalStop(stop_mu_, stop_, stop_cv_);
  if (thread_.joinable()) thread_.join();
}

void LeaderElection::Start() {
  thread_ = std::thread([this] { Campaign(); });
}

void LeaderElection::Abandon() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
    resign_ = false;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string LeaderElection::leader() const {
  std::lock_guard lock(mu_);
  return seen_leader_;
}

bool LeaderElection::WaitStop(std::chrono::milliseconds d) {
  std::unique_lock lock(stop_mu_);
  return stop_cv_.wait_for(lock, d, [this] { return stop_; });
}

void LeaderElection::SetLeader(bool leader) {
  if (leader_.exchange(leader) == leader) return;
  if (leader) {
    spdlog::info("election {}: {} is the leader", key_, identity_);
  } else {
    spdlog::warn("election {}: {} is no longer the leader", key_, identity_);
  }
  if (on_change_) on_change_(leader);
}

void LeaderElection::Campaign() {
  const auto renew_every = std::chrono::milliseconds(options_.lease_ttl_s * 1000 / 3);
  const auto ttl = std::chrono::seconds(options_.lease_ttl_s);
  int64_t lease = 0;
  auto renewed = Clock::now();
  while (true) {
    const bool leading = leader_.load();
    if (WaitStop(leading ? renew_every : options_.poll)) break;
    if (lease != 0 && Clock::now() - renewed >= renew_every) {
      auto kept = etcd_->KeepAlive(lease);
      if (kept.ok()) {
        renewed = Clock::now();
        if (leader_.load()) {  // still ours? (an operator may have deleted the key)
          auto held = etcd_->Get(key_);
          if (held.ok() && (held->kvs.empty() || held->kvs[0].value != identity_)) {
            SetLeader(false);
          }
        }
      } else if (kept.status().code() == StatusCode::kNotFound) {
        lease = 0;  // expired: whatever we held is gone
        SetLeader(false);
      } else if (Clock::now() - renewed >= ttl - std::chrono::milliseconds(500)) {
        // etcd unreachable for about a TTL: another may take the key once it expires; step
        // down first so two never act as leader.
        SetLeader(false);
        lease = 0;
      }
    }
    if (leader_.load()) continue;
    if (lease == 0) {
      auto granted = etcd_->GrantLease(options_.lease_ttl_s);
      if (!granted.ok()) continue;
      lease = *granted;
      renewed = Clock::now();
    }
    RangeResult current;
    auto won = etcd_->PutIfAbsent(key_, identity_, lease, &current);
    if (!won.ok()) continue;
    {
      std::lock_guard lock(mu_);
      seen_leader_ = *won ? identity_ : (current.kvs.empty() ? "" : current.kvs[0].value);
    }
    if (*won) SetLeader(true);
  }
  bool resign;
  {
    std::lock_guard lock(stop_mu_);
    resign = resign_;
  }
  if (resign && lease != 0) {
    if (leader_.load()) (void)etcd_->DeleteIfValue(key_, identity_);
    (void)etcd_->RevokeLease(lease);
  }
  if (resign) SetLeader(false);
}

}  // namespace shoal::cluster
