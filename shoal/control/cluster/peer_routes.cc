#include "shoal/control/cluster/peer_routes.h"

#include <spdlog/spdlog.h>

namespace shoal::cluster {

PeerRoutes::PeerRoutes(std::string self, PlacedFunctions* placed, NodeDirectory* nodes,
                       ModelOf model_of)
    : self_(std::move(self)),
      placed_(placed),
      nodes_(nodes),
      model_of_(std::move(model_of)),
      table_(std::make_shared<Table>()) {}

void PeerRoutes::Rebuild() {
  std::lock_guard rebuilding(rebuild_mu_);
  std::map<std::string, std::string> address;  // live node -> gateway
  auto table = std::make_shared<Table>();
  for (const auto& n : nodes_->List()) {
    address[n.record.name] = n.record.address;
    if (n.record.name == self_ || n.record.address.empty()) continue;
    for (const auto& job : n.record.fl_jobs) {
      table->by_job[job].push_back({n.record.name, n.record.address});
    }
  }
  size_t routes = 0;
  for (const auto& e : placed_->All()) {
    std::vector<ForwardTarget> targets;
    for (const auto& node : e.nodes) {
      if (node == self_) continue;  // placed here: the node's own table serves it
      auto it = address.find(node);
      if (it == address.end() || it->second.empty()) continue;  // its lease ended
      targets.push_back({node, it->second});
    }
    if (targets.empty()) continue;
    routes += targets.size();
    if (model_of_) {
      if (std::string model = model_of_(e.function); !model.empty()) {
        table->by_model[model] = targets;
      }
    }
    table->by_function[e.function.name] = std::move(targets);
  }
  spdlog::debug("cluster: forwarding table: {} function(s), {} route(s)", table->by_function.size(),
                routes);
  std::lock_guard lock(mu_);
  table_ = std::move(table);
}

bool PeerRoutes::Pick(Kind kind, std::string_view name, ForwardTarget* out) {
  std::shared_ptr<const Table> table;
  {
    std::lock_guard lock(mu_);
    table = table_;
  }
  const auto& map = kind == Kind::kModel ? table->by_model
                    : kind == Kind::kJob ? table->by_job
                                         : table->by_function;
  auto it = map.find(name);
  if (it == map.end() || it->second.empty()) return false;
  // In turn over the nodes (warm ones are listed first, so a lone warm node takes the most).
  const uint64_t n = turn_.fetch_add(1, std::memory_order_relaxed);
  *out = it->second[n % it->second.size()];
  return true;
}

std::map<std::string, std::vector<ForwardTarget>> PeerRoutes::Functions() const {
  std::shared_ptr<const Table> table;
  {
    std::lock_guard lock(mu_);
    table = table_;
  }
  return {table->by_function.begin(), table->by_function.end()};
}

}  // namespace shoal::cluster
