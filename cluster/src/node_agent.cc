#include "shoal/cluster/node_agent.h"

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
                                                    std::function<void()> on_functions) {
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
  agent->placed_ = std::make_unique<PlacedFunctions>(
      agent->etcd_.get(), ClusterKeys(ClusterPrefix(config.cluster)), node, std::move(on_functions));
  NodeAgent* a = agent.get();
  agent->starter_ = std::thread([a] {
    auto backoff = std::chrono::milliseconds(100);
    while (!a->stop_.load()) {
      Status st = a->placed_->Start();
      if (st.ok()) {
        spdlog::info("cluster: watching the functions placed on this node");
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

void NodeAgent::Leave() {
  if (membership_ && membership_->state() != MembershipState::kLeft) {
    Status st = membership_->Leave();
    if (!st.ok()) spdlog::warn("cluster: leaving: {}", st.message());
  }
}

NodeAgent::~NodeAgent() {
  stop_.store(true);
  if (starter_.joinable()) starter_.join();
  placed_.reset();
  Leave();
}

std::string NodeAgent::StatusLine() const {
  return std::string("etcd: ") + MembershipStateName(state()) + ": " + detail();
}

std::string NodeAgent::MetricsText() const {
  std::ostringstream o;
  o << "# HELP shoal_cluster_etcd_connected Whether this node's registration in etcd is live.\n"
    << "# TYPE shoal_cluster_etcd_connected gauge\n"
    << "shoal_cluster_etcd_connected " << (state() == MembershipState::kRegistered ? 1 : 0)
    << "\n"
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
