// The gateway's forwarding table in cluster mode: for each cluster function (and the OIP model
// it serves), the live nodes placed to run it with their gateway addresses; for each FL job, the
// node that runs it (from the nodes' records). Rebuilt from the
// placements and the node directory whenever either changes (watch threads); read by the gateway
// loops through ForwardTable::Pick, which takes a mutex only to copy a shared pointer.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/control/cluster/cluster_function.h"
#include "shoal/control/cluster/node_directory.h"
#include "shoal/control/cluster/placed_functions.h"
#include "shoal/interfaces/forward_table.h"

namespace shoal::cluster {

class PeerRoutes final : public ForwardTable {
 public:
  // The OIP model name a function serves ("" for none): the node parses the manifest.
  using ModelOf = std::function<std::string(const ClusterFunction&)>;
  PeerRoutes(std::string self, PlacedFunctions* placed, NodeDirectory* nodes, ModelOf model_of);

  void Rebuild();
  bool Pick(Kind kind, std::string_view name, ForwardTarget* out) override;
  const std::string& self() const override { return self_; }
  // function -> nodes it may be forwarded to (tests, /v1/node).
  std::map<std::string, std::vector<ForwardTarget>> Functions() const;

 private:
  struct Table {
    std::map<std::string, std::vector<ForwardTarget>, std::less<>> by_function;
    std::map<std::string, std::vector<ForwardTarget>, std::less<>> by_model;
    std::map<std::string, std::vector<ForwardTarget>, std::less<>> by_job;
  };
  const std::string self_;
  PlacedFunctions* placed_;
  NodeDirectory* nodes_;
  ModelOf model_of_;
  std::mutex rebuild_mu_;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> table_;
  std::atomic<uint64_t> turn_{0};
};

}  // namespace shoal::cluster
