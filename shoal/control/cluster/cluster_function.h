// A function deployed on the cluster as etcd keeps it (<prefix>/functions/<name>): its manifest
// as deployed (each node parses it with its own defaults), the id the data plane counts it by on
// every node, and its generation; and a placement of it on one node
// (<prefix>/placements/<fn>/<node>): the share of its scale that node runs.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/common/status.h"
#include "shoal/control/cluster/manifest_record.h"

namespace shoal::cluster {

// Cluster functions take ids from this range on every node (a node's own registry counts up
// from 1, FL leaves down from 4095), so the three never meet on a node's BPF counters.
inline constexpr uint32_t kClusterFunctionIdFirst = 2048;
inline constexpr uint32_t kClusterFunctionIdLast = 3071;

struct ClusterFunction : ManifestRecord {
  uint32_t id = 0;

  std::string ToJson() const;
  static Result<ClusterFunction> FromJson(const std::string& text);
};

struct Placement {
  uint64_t generation = 0;  // of the function it places
  uint32_t min_scale = 0;   // instances this node keeps
  uint32_t max_scale = 0;   // instances this node may run

  std::string ToJson() const;
  static Result<Placement> FromJson(const std::string& text);
};

}  // namespace shoal::cluster
