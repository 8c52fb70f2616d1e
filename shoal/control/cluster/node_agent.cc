#include "shoal/control/cluster/node_agent.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace shoal::cluster {

std::string ClusterPrefix(const std::string& cluster) { return "/shoal/" + cluster; }

std::string AdvertiseHost(const NodeConfig& config) {
  if (!config.advertise_host.empty()) return config.advertise_host;
  const std::string& h = config.listen_host;
  if (!h.empty() && h != "0.0.0.0" && h != "::") return h;
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
      found = text;
      break;
    }
    freeifaddrs(list);
  }
  return found;
}

Result<std::unique_ptr<NodeAgent>> NodeAgent::Start(const NodeConfig& config, NodeRecord record,
                                                    std::function<void()> on_functions,
                                                    PeerRoutes::ModelOf model_of) {
  const std::string node = record.name;
  auto endpoints = ParseEndpoints(config.etcd);
  if (!endpoints.ok()) return endpoints.status();
  EtcdOptions o;
  o.endpoints = *endpoints;
  auto client = EtcdClient::Create(o);
  if (!client.ok()) return client.status();
  std::unique_ptr<NodeAgent> agent(new NodeAgent());
  agent->etcd_ = std::move(*client);
  MembershipOptions m;
  m.lease_ttl_s = config.node_lease_ttl_s;
  agent->membership_ = std::make_unique<NodeMembership>(
      agent->etcd_.get(), ClusterKeys(ClusterPrefix(config.cluster)), std::move(record), m);
  Status st = agent->membership_->Join();
  if (!st.ok() && st.code() != StatusCode::kUnavailable) return st;
  if (!st.ok()) {
    spdlog::warn("cluster: etcd does not answer yet ({}); serving, and registering when it does",
                 st.message());
  }
  NodeAgent* a = agent.get();
  const ClusterKeys keys(ClusterPrefix(config.cluster));
  // The routes are rebuilt on every change of functions, placements or nodes; they are made
  // before the watches that call them start (below, on the starter thread).
  agent->placed_ = std::make_unique<PlacedFunctions>(
      agent->etcd_.get(), keys, node, std::move(on_functions), [a] { a->RebuildRoutes(); });
  agent->nodes_ = std::make_unique<NodeDirectory>(
      agent->etcd_.get(), keys, [a](const std::string&, bool) { a->RebuildRoutes(); });
  agent->routes_ = std::make_unique<PeerRoutes>(node, agent->placed_.get(), agent->nodes_.get(),
                                                std::move(model_of));
  agent->starter_ = std::thread([a] {
    auto backoff = std::chrono::milliseconds(100);
    bool nodes_started = false;
    while (!a->stop_.load()) {
      Status st = nodes_started ? Status::Ok() : a->nodes_->Start();
      nodes_started = st.ok();
      if (st.ok()) st = a->placed_->Start();
      if (st.ok()) {
        a->RebuildRoutes();
        spdlog::info(
            "cluster: watching the functions placed on this node and the nodes to "
            "forward to");
        return;
      }
      for (auto waited = std::chrono::milliseconds(0); waited < backoff && !a->stop_.load();
           waited += std::chrono::milliseconds(20)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    }
  });
  return agent;
}

void NodeAgent::StopRecorder() {
  {
    std::lock_guard lock(record_mu_);
    stop_.store(true);
  }
  record_cv_.notify_all();
  if (recorder_.joinable()) recorder_.join();
}

void NodeAgent::Leave() {
  StopRecorder();  // first: its source reads what shoald is about to stop
  if (membership_ && membership_->state() != MembershipState::kLeft) {
    Status st = membership_->Leave();
    if (!st.ok()) spdlog::warn("cluster: leaving: {}", st.message());
  }
}

void NodeAgent::SetRecordSource(std::function<void(NodeRecord*)> fill) {
  {
    std::lock_guard lock(record_mu_);
    fill_ = std::move(fill);
    record_dirty_ = true;
    if (!recorder_.joinable()) recorder_ = std::thread([this] { RecordLoop(); });
  }
  record_cv_.notify_all();
}

void NodeAgent::Refresh() {
  {
    std::lock_guard lock(record_mu_);
    record_dirty_ = true;
  }
  record_cv_.notify_all();
}

void NodeAgent::RecordLoop() {
  std::unique_lock lock(record_mu_);
  while (!stop_.load()) {
    // Every 2 s the offered signals go out; every 10 s the record is looked at again: what it
    // says may change without anyone calling Refresh() (an instance became ready, a cold start
    // was measured); an unchanged record is not written.
    const bool asked = record_cv_.wait_for(lock, std::chrono::seconds(2),
                                           [this] { return stop_.load() || record_dirty_; });
    if (stop_.load()) return;
    if (!signals_.empty()) {
      lock.unlock();
      PublishSignals();
      lock.lock();
    }
    if (!asked && ++idle_ticks_ >= 5) {
      idle_ticks_ = 0;
      record_dirty_ = true;
    }
    if (!record_dirty_ || !fill_) continue;
    record_dirty_ = false;
    auto fill = fill_;
    lock.unlock();
    NodeRecord record = membership_->record();
    const std::string before = record.ToJson();
    fill(&record);
    Status st = before == record.ToJson() ? Status::Ok() : membership_->Update(std::move(record));
    lock.lock();
    if (!st.ok()) {
      spdlog::warn("cluster: updating this node's record: {} (retrying)", st.message());
      record_dirty_ = true;
    }
  }
}

void NodeAgent::OfferSignals(const std::string& function, const NodeSignals& signals) {
  {
    std::lock_guard lock(record_mu_);
    signals_[function] = signals;
    if (!recorder_.joinable() && !stop_.load()) {
      recorder_ = std::thread([this] { RecordLoop(); });
    }
  }
}

void NodeAgent::PublishSignals() {
  std::map<std::string, NodeSignals> out;
  {
    std::lock_guard lock(record_mu_);
    out.swap(signals_);
  }
  const int64_t lease = membership_->lease();
  if (lease == 0) return;  // not registered: the leader would not count this node anyway
  const std::string node = membership_->record().name;
  for (const auto& [fn, s] : out) {
    auto put = etcd_->Put(keys().Signals(fn) + node, s.ToJson(), lease);
    if (!put.ok()) {
      spdlog::debug("cluster: publishing {}'s signals: {}", fn, put.status().message());
      return;
    }
  }
}

void NodeAgent::RebuildRoutes() {
  std::lock_guard lock(routes_mu_);
  if (routes_live_) routes_->Rebuild();
}

NodeAgent::~NodeAgent() {
  StopRecorder();
  {
    std::lock_guard lock(routes_mu_);
    routes_live_ = false;
  }
  if (starter_.joinable()) starter_.join();
  placed_.reset();
  nodes_.reset();
  Leave();
}

std::string NodeAgent::StatusLine() const {
  return std::string("etcd: ") + MembershipStateName(state()) + ": " + detail();
}

std::string NodeAgent::MetricsText() const {
  std::ostringstream o;
  o << "# HELP shoal_cluster_etcd_connected Whether this node's registration in etcd is live.\n"
    << "# TYPE shoal_cluster_etcd_connected gauge\n"
    << "shoal_cluster_etcd_connected " << (state() == MembershipState::kRegistered ? 1 : 0) << "\n"
    << "# HELP shoal_cluster_etcd_calls_total Round trips to etcd.\n"
    << "# TYPE shoal_cluster_etcd_calls_total counter\n"
    << "shoal_cluster_etcd_calls_total " << etcd_->calls() << "\n"
    << "# HELP shoal_cluster_etcd_failures_total Calls no etcd member answered.\n"
    << "# TYPE shoal_cluster_etcd_failures_total counter\n"
    << "shoal_cluster_etcd_failures_total " << etcd_->failures() << "\n"
    << "# HELP shoal_cluster_etcd_latency_seconds The last etcd round trip.\n"
    << "# TYPE shoal_cluster_etcd_latency_seconds gauge\n"
    << "shoal_cluster_etcd_latency_seconds " << etcd_->last_latency_us() / 1e6 << "\n";
  return o.str();
}

}  // namespace shoal::cluster
