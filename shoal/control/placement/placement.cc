#include "shoal/control/placement/placement.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "shoal/common/enum_names.h"

namespace shoal {
namespace {

// Slack for capacities given as sums of fractional cores.
constexpr double kEps = 1e-9;

bool FitsIn(const Resources& free, const Resources& r) {
  return r.cores <= free.cores + kEps && r.memory_mb <= free.memory_mb + kEps &&
         r.gpus <= free.gpus;
}

void Sub(Resources& a, const Resources& b) {
  a.cores -= b.cores;
  a.memory_mb -= b.memory_mb;
  a.gpus -= b.gpus;
}

std::string Describe(const Resources& r) {
  return std::to_string(r.cores) + " cores, " + std::to_string(r.memory_mb) + " MB, " +
         std::to_string(r.gpus) + " GPUs";
}

}  // namespace

Resources NodeState::Free() const {
  return {capacity.cores - used.cores, capacity.memory_mb - used.memory_mb,
          capacity.gpus - used.gpus};
}

bool NodeState::Fits(const Resources& r) const { return FitsIn(Free(), r); }

size_t ClusterModel::AddNode(std::string name, Resources capacity, double cold_start_cost_s) {
  NodeState n;
  n.name = std::move(name);
  n.capacity = capacity;
  n.cold_start_cost_s = cold_start_cost_s;
  nodes_.push_back(std::move(n));
  return nodes_.size() - 1;
}

Status ClusterModel::Allocate(size_t i, const Resources& r) {
  if (i >= nodes_.size()) return InvalidArgument("no node " + std::to_string(i));
  NodeState& n = nodes_[i];
  if (!n.Fits(r)) {
    return ResourceExhausted("node " + n.name + " has " + Describe(n.Free()) + " free, needs " +
                             Describe(r));
  }
  n.used.cores += r.cores;
  n.used.memory_mb += r.memory_mb;
  n.used.gpus += r.gpus;
  return Status::Ok();
}

void ClusterModel::Release(size_t i, const Resources& r) {
  NodeState& n = nodes_[i];
  n.used.cores = std::max(0.0, n.used.cores - r.cores);
  n.used.memory_mb = std::max(0.0, n.used.memory_mb - r.memory_mb);
  n.used.gpus = n.used.gpus >= r.gpus ? n.used.gpus - r.gpus : 0;
}

const char* PlacementKindName(PlacementKind kind) {
  static constexpr EnumName<PlacementKind> kNames[] = {{PlacementKind::kWarm, "warm"},
                                                       {PlacementKind::kCached, "cached"},
                                                       {PlacementKind::kCold, "cold"}};
  return NameOf(kNames, kind, "?");
}

Result<PlacementDecision> Place(const ClusterModel& cluster, const PlacementRequest& request) {
  if (cluster.size() == 0) return ResourceExhausted("no nodes in the cluster");
  const auto& nodes = cluster.nodes();
  // A warm idle instance already holds its resources; it only has to be on a node that could
  // run the request's GPUs at all.
  int best = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto it = nodes[i].idle_warm.find(request.function);
    if (it == nodes[i].idle_warm.end() || it->second == 0) continue;
    if (request.resources.gpus > nodes[i].capacity.gpus) continue;
    if (best < 0 || nodes[i].Free().cores > nodes[best].Free().cores) best = static_cast<int>(i);
  }
  if (best >= 0) return PlacementDecision{static_cast<size_t>(best), PlacementKind::kWarm, 0.0};

  // Otherwise a new instance: cached code first, then the cheapest cold start.
  auto better = [&](size_t i, int cur) {
    if (cur < 0) return true;
    const NodeState& a = nodes[i];
    const NodeState& b = nodes[cur];
    if (a.cold_start_cost_s != b.cold_start_cost_s)
      return a.cold_start_cost_s < b.cold_start_cost_s;
    return a.Free().cores > b.Free().cores;
  };
  int cached = -1, cold = -1;
  bool gpu_anywhere = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].capacity.gpus >= request.resources.gpus) gpu_anywhere = true;
    if (!nodes[i].Fits(request.resources)) continue;
    if (nodes[i].cached.count(request.function)) {
      if (better(i, cached)) cached = static_cast<int>(i);
    } else if (better(i, cold)) {
      cold = static_cast<int>(i);
    }
  }
  if (cached >= 0) {
    return PlacementDecision{static_cast<size_t>(cached), PlacementKind::kCached,
                             nodes[cached].cold_start_cost_s};
  }
  if (cold >= 0) {
    return PlacementDecision{static_cast<size_t>(cold), PlacementKind::kCold,
                             nodes[cold].cold_start_cost_s};
  }
  if (!gpu_anywhere) {
    return ResourceExhausted("no node has " + std::to_string(request.resources.gpus) +
                             " GPUs for " + request.function);
  }
  return ResourceExhausted("no node has room for " + request.function + " (" +
                           Describe(request.resources) + ")");
}

Result<FlPlacement> PlaceFlJob(const ClusterModel& cluster, const FlPlacementRequest& request) {
  if (request.leaves == 0) return InvalidArgument("FL job " + request.job + " asks for no leaves");
  std::vector<Resources> free;
  free.reserve(cluster.size());
  for (const auto& n : cluster.nodes()) free.push_back(n.Free());

  double total_share = 0;
  for (const auto& [node, share] : request.gateway_shares) {
    if (node >= cluster.size()) {
      return InvalidArgument("FL job " + request.job + ": gateway node " + std::to_string(node) +
                             " does not exist");
    }
    if (share < 0) return InvalidArgument("FL job " + request.job + ": negative gateway share");
    total_share += share;
  }

  // Largest-remainder apportionment of the leaves over the gateway nodes.
  std::vector<std::pair<size_t, double>> gw = request.gateway_shares;
  std::stable_sort(gw.begin(), gw.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::vector<uint32_t> want(gw.size(), 0);
  if (total_share > 0) {
    uint32_t given = 0;
    std::vector<std::pair<double, size_t>> rem;
    for (size_t k = 0; k < gw.size(); ++k) {
      const double exact = request.leaves * gw[k].second / total_share;
      want[k] = static_cast<uint32_t>(std::floor(exact));
      given += want[k];
      rem.push_back({exact - want[k], k});
    }
    std::stable_sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (size_t j = 0; given < request.leaves; j = (j + 1) % rem.size(), ++given) {
      ++want[rem[j].second];
    }
  }

  FlPlacement out;
  std::vector<uint32_t> held(cluster.size(), 0);
  uint32_t overflow = 0;
  for (size_t k = 0; k < gw.size(); ++k) {
    for (uint32_t j = 0; j < want[k]; ++j) {
      if (FitsIn(free[gw[k].first], request.leaf_resources)) {
        Sub(free[gw[k].first], request.leaf_resources);
        out.leaf_nodes.push_back(gw[k].first);
        ++held[gw[k].first];
      } else {
        ++overflow;
      }
    }
  }
  if (total_share <= 0) overflow = request.leaves;
  // Overflow: other gateway nodes by share first, then the cheapest cold start anywhere.
  while (overflow > 0) {
    int pick = -1;
    for (const auto& [node, share] : gw) {
      if (share > 0 && FitsIn(free[node], request.leaf_resources)) {
        pick = static_cast<int>(node);
        break;
      }
    }
    if (pick < 0) {
      for (size_t i = 0; i < cluster.size(); ++i) {
        if (!FitsIn(free[i], request.leaf_resources)) continue;
        if (pick < 0 || cluster.node(i).cold_start_cost_s < cluster.node(pick).cold_start_cost_s) {
          pick = static_cast<int>(i);
        }
      }
    }
    if (pick < 0) {
      return ResourceExhausted("FL job " + request.job + ": no room for leaf aggregator " +
                               std::to_string(out.leaf_nodes.size() + 1) + " of " +
                               std::to_string(request.leaves) + " (" +
                               Describe(request.leaf_resources) + ")");
    }
    Sub(free[pick], request.leaf_resources);
    out.leaf_nodes.push_back(static_cast<size_t>(pick));
    ++held[pick];
    --overflow;
  }

  // Top aggregator: the node with most leaves that has room; ties to the larger gateway share.
  auto share_of = [&](size_t node) {
    double s = 0;
    for (const auto& [n, sh] : gw)
      if (n == node) s += sh;
    return s;
  };
  int top = -1;
  for (size_t i = 0; i < cluster.size(); ++i) {
    if (!FitsIn(free[i], request.top_resources)) continue;
    if (top < 0 || held[i] > held[top] || (held[i] == held[top] && share_of(i) > share_of(top))) {
      top = static_cast<int>(i);
    }
  }
  if (top < 0) {
    return ResourceExhausted("FL job " + request.job + ": no room for the top aggregator (" +
                             Describe(request.top_resources) + ")");
  }
  out.top_node = static_cast<size_t>(top);
  return out;
}

}  // namespace shoal
