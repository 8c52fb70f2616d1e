#include "shoal/control/cluster/membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "shoal/common/stop_signal.h"

namespace shoal::cluster {

const char* MembershipStateName(MembershipState s) {
  switch (s) {
    case MembershipState::kJoining:
      return "joining";
    case MembershipState::kRegistered:
      return "registered";
    case MembershipState::kDisconnected:
      return "disconnected";
    case MembershipState::kConflict:
      return "conflict";
    case MembershipState::kLeft:
      return "left";
  }
  return "?";
}

NodeMembership::NodeMembership(EtcdClient* etcd, ClusterKeys keys, NodeRecord record,
                               MembershipOptions options, StateFn on_state)
    : etcd_(etcd),
      keys_(std::move(keys)),
      options_(options),
      on_state_(std::move(on_state)),
      record_(std::move(record)) {}

NodeMembership::~NodeMembership() {
  SignalStop(stop_mu_, stop_, stop_cv_);
  if (renewer_.joinable()) renewer_.join();
}

std::string NodeMembership::detail() const {
  std::lock_guard lock(mu_);
  return detail_;
}

void NodeMembership::SetState(MembershipState s, const std::string& detail) {
  const MembershipState before = state_.exchange(s);
  std::string old;
  {
    std::lock_guard lock(mu_);
    old = detail_;
    detail_ = detail;
  }
  if (before != s || old != detail) {
    if (s == MembershipState::kRegistered) {
      spdlog::info("cluster: node {} {}", record_.name, detail);
    } else if (s != MembershipState::kLeft) {
      spdlog::warn("cluster: node {} {}: {}", record_.name, MembershipStateName(s), detail);
    }
    if (on_state_) on_state_(s, detail);
  }
}

Status NodeMembership::CheckProtocol() {
  const std::string mine =
      std::to_string(kClusterProtocolMajor) + "." + std::to_string(kClusterProtocolMinor);
  RangeResult current;
  auto created = etcd_->PutIfAbsent(keys_.Version(), mine, 0, &current);
  if (!created.ok()) return created.status();
  if (*created || current.kvs.empty()) return Status::Ok();
  const std::string& theirs = current.kvs[0].value;
  int major = -1;
  if (std::sscanf(theirs.c_str(), "%d", &major) != 1 || major != kClusterProtocolMajor) {
    return InvalidArgument("cluster " + keys_.prefix() + " speaks protocol " + theirs +
                           " and this shoald speaks " + mine + ": it cannot join");
  }
  return Status::Ok();
}

Status NodeMembership::Register() {
  auto lease = etcd_->GrantLease(options_.lease_ttl_s);
  if (!lease.ok()) return lease.status();
  std::string json;
  std::string address;
  {
    std::lock_guard lock(mu_);
    json = record_.ToJson();
    address = record_.address;
  }
  const std::string key = keys_.Node(record_.name);
  for (int attempt = 0; attempt < 2; ++attempt) {
    RangeResult current;
    auto created = etcd_->PutIfAbsent(key, json, *lease, &current);
    if (!created.ok()) return created.status();
    if (*created) {
      lease_.store(*lease);
      return Status::Ok();
    }
    if (current.kvs.empty()) continue;  // gone in between: try again
    auto theirs = NodeRecord::FromJson(current.kvs[0].value);
    if (theirs.ok() && theirs->address == address) {
      // Our own previous life (a restart within its lease's TTL): end that lease now.
      spdlog::info("cluster: node {} takes over its previous registration (lease {})", record_.name,
                   current.kvs[0].lease);
      Status revoked = etcd_->RevokeLease(current.kvs[0].lease);
      if (!revoked.ok() && revoked.code() != StatusCode::kNotFound) {
        (void)etcd_->RevokeLease(*lease);
        return revoked;
      }
      continue;
    }
    (void)etcd_->RevokeLease(*lease);
    return AlreadyExists("node name '" + record_.name + "' is held by a live node at " +
                         (theirs.ok() ? theirs->address : std::string("an unknown address")) +
                         " (" + key + ", lease " + std::to_string(current.kvs[0].lease) +
                         "): give this node another --node-name or stop that one");
  }
  (void)etcd_->RevokeLease(*lease);
  return Unavailable("node " + record_.name + ": the registration kept changing under us");
}

Status NodeMembership::Join() {
  SHOAL_RETURN_IF_ERROR(ValidateNodeName(record_.name));
  Status st = CheckProtocol();
  if (st.ok()) st = Register();
  if (st.ok()) {
    SetState(MembershipState::kRegistered, "registered at " + keys_.Node(record_.name) +
                                               " (lease " + std::to_string(lease_.load()) +
                                               ", TTL " + std::to_string(options_.lease_ttl_s) +
                                               " s)");
  } else if (st.code() == StatusCode::kUnavailable) {
    SetState(MembershipState::kDisconnected, st.message());
  } else {
    return st;  // a conflict or a protocol mismatch: the caller refuses to start
  }
  renewer_ = std::thread([this] { Renew(); });
  return st;
}

void NodeMembership::Renew() {
  const auto interval = std::chrono::milliseconds(options_.lease_ttl_s * 1000 / 3);
  auto backoff = std::chrono::milliseconds(100);
  auto wait = interval;
  while (true) {
    {
      std::unique_lock lock(stop_mu_);
      if (stop_cv_.wait_for(lock, wait, [this] { return stop_; })) return;
    }
    Status st;
    if (lease_.load() != 0) {
      auto ttl = etcd_->KeepAlive(lease_.load());
      st = ttl.status();
      if (st.code() == StatusCode::kNotFound) {
        lease_.store(0);  // it ran out while etcd was away: register again
        st = Status::Ok();
      } else if (st.ok()) {
        if (state_.load() != MembershipState::kRegistered) {
          SetState(MembershipState::kRegistered,
                   "renewing again (lease " + std::to_string(lease_.load()) + ")");
        }
        backoff = std::chrono::milliseconds(100);
        wait = interval;
        continue;
      }
    }
    if (st.ok() && lease_.load() == 0) {
      st = Register();
      if (st.ok()) {
        SetState(MembershipState::kRegistered, "registered again at " + keys_.Node(record_.name) +
                                                   " (lease " + std::to_string(lease_.load()) +
                                                   ")");
        backoff = std::chrono::milliseconds(100);
        wait = interval;
        continue;
      }
    }
    SetState(st.code() == StatusCode::kAlreadyExists ? MembershipState::kConflict
                                                     : MembershipState::kDisconnected,
             st.message());
    wait = std::min<std::chrono::milliseconds>(backoff, interval);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

Status NodeMembership::Update(NodeRecord record) {
  std::string json;
  {
    std::lock_guard lock(mu_);
    record.name = record_.name;
    record_ = std::move(record);
    json = record_.ToJson();
  }
  const int64_t lease = lease_.load();
  if (lease == 0) return Status::Ok();  // written at the next registration
  // Only over our own registration: a record whose lease is gone must not be resurrected.
  auto r = etcd_->Put(keys_.Node(record_.name), json, lease);
  return r.status();
}

NodeRecord NodeMembership::record() const {
  std::lock_guard lock(mu_);
  return record_;
}

Status NodeMembership::Leave() {
  SignalStop(stop_mu_, stop_, stop_cv_);
  if (renewer_.joinable()) renewer_.join();
  const int64_t lease = lease_.exchange(0);
  SetState(MembershipState::kLeft, "left the cluster");
  if (lease == 0) return Status::Ok();
  Status st = etcd_->RevokeLease(lease);
  if (st.code() == StatusCode::kNotFound) return Status::Ok();
  return st;
}

}  // namespace shoal::cluster
