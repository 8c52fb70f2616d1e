// A node's view of the cluster functions: watches <prefix>/functions/ and <prefix>/placements/
// and keeps the functions whose placement names this node, with this node's share of their
// scale (shoald's instance manager runs them beside the node's own), and which nodes run every
// other one (the gateway forwards there: PeerRoutes).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/control/cluster/cluster_function.h"
#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_record.h"

namespace shoal::cluster {

struct PlacedFunction {
  ClusterFunction function;
  Placement placement;
};

class PlacedFunctions {
 public:
  // `on_change` runs (on a watch thread) whenever the set placed here or one of its placements
  // changes; `on_any` whenever any function or placement in the cluster does.
  PlacedFunctions(EtcdClient* etcd, ClusterKeys keys, std::string node,
                  std::function<void()> on_change, std::function<void()> on_any = {});
  ~PlacedFunctions();
  // Reads both prefixes and starts the watches; kUnavailable when etcd does not answer (the
  // caller retries: until then the node runs only its own functions).
  Status Start();
  bool started() const;
  std::vector<PlacedFunction> List() const;  // placed here, by name
  // Every cluster function with the nodes whose placement lets them run it (max_scale > 0),
  // those that keep warm instances (min_scale > 0) first.
  struct Everywhere {
    ClusterFunction function;
    std::vector<std::string> nodes;
  };
  std::vector<Everywhere> All() const;

 private:
  void Resync();  // re-reads both prefixes (start, and after a compaction)
  // Forgets what it knew and takes the read prefixes as they are (their key-values move out).
  void Replace(RangeResult& functions, RangeResult& placements);
  void OnFunctions(const std::vector<WatchEvent>& events);
  void OnPlacements(const std::vector<WatchEvent>& events);
  EtcdClient* etcd_;
  ClusterKeys keys_;
  std::string node_;
  std::function<void()> on_change_;
  std::function<void()> on_any_;
  mutable std::mutex mu_;
  std::map<std::string, ClusterFunction> functions_;             // every cluster function, by name
  std::map<std::string, Placement> placements_;                  // this node's, by function
  std::map<std::string, std::map<std::string, Placement>> all_;  // function -> node -> placement
  std::unique_ptr<EtcdWatch> functions_watch_;
  std::unique_ptr<EtcdWatch> placements_watch_;
};

}  // namespace shoal::cluster
