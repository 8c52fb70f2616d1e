// Cluster model and cold-start-aware placement: which node a new instance of a function goes
// to (a warm idle instance first, then a node with the code cached, then the cheapest cold
// start, within capacity and GPU requests), and where an FL job's aggregators go (LIFL
// locality: leaves beside the gateways that receive the updates, the top beside most leaves).
// Used by the simulator (many nodes) and by shoald's instance manager, which places every
// instance start over a one-node model of its own node; the multi-node controller comes later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

struct Resources {
  double cores = 0;
  double memory_mb = 0;
  uint32_t gpus = 0;
};

struct NodeState {
  std::string name;
  Resources capacity;
  Resources used;
  // Measured mean spawn-to-ready time of an instance whose code is not cached here.
  double cold_start_cost_s = 0;
  // Ready instances with nothing in flight, per function: taking one costs no start at all.
  std::unordered_map<std::string, uint32_t> idle_warm;
  // Functions whose code (image, dependencies, model) is already on this node.
  std::unordered_set<std::string> cached;

  bool Fits(const Resources& r) const;
  Resources Free() const;
};

class ClusterModel {
 public:
  size_t AddNode(std::string name, Resources capacity, double cold_start_cost_s);
  size_t size() const { return nodes_.size(); }
  NodeState& node(size_t i) { return nodes_[i]; }
  const NodeState& node(size_t i) const { return nodes_[i]; }
  const std::vector<NodeState>& nodes() const { return nodes_; }

  // Reserves `r` on node `i`; ResourceExhausted (naming the resource) when it does not fit.
  Status Allocate(size_t i, const Resources& r);
  void Release(size_t i, const Resources& r);

 private:
  std::vector<NodeState> nodes_;
};

struct PlacementRequest {
  std::string function;
  Resources resources;
};

enum class PlacementKind { kWarm, kCached, kCold };
const char* PlacementKindName(PlacementKind kind);

struct PlacementDecision {
  size_t node = 0;
  PlacementKind kind = PlacementKind::kCold;
  // 0 for a warm instance, else the node's estimate (which the caller may refine for cached code).
  double expected_cold_start_s = 0;
};

// Picks a node for one instance; does not change the model (the caller allocates).
// Ties go to the node with the most free cores, then the lowest index.
Result<PlacementDecision> Place(const ClusterModel& cluster, const PlacementRequest& request);

struct FlPlacementRequest {
  std::string job;
  uint32_t leaves = 0;
  Resources leaf_resources;
  Resources top_resources;
  // The nodes whose gateways receive the job's client updates, each with its share of them.
  std::vector<std::pair<size_t, double>> gateway_shares;
};

struct FlPlacement {
  std::vector<size_t> leaf_nodes;  // one entry per leaf aggregator
  size_t top_node = 0;
};

// Leaves are apportioned to the gateway nodes by share (largest remainder), capped by each
// node's free capacity; leaves that do not fit go to the other gateway nodes with room, then to
// the cheapest cold start elsewhere. The top aggregator goes to the node holding most leaves
// that still has room for it. Does not change the model.
Result<FlPlacement> PlaceFlJob(const ClusterModel& cluster, const FlPlacementRequest& request);

}  // namespace shoal
