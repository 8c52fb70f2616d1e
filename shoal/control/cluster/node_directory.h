// A view of the cluster's nodes: every record under <prefix>/nodes/, read once
// and then kept current by a watch (a node whose lease runs out is gone from here within the
// watch's latency). The controller's placement and `GET /v1/nodes` read it;
// a node's gateway reads it for the addresses it forwards to.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_record.h"

namespace shoal::cluster {

struct NodeEntry {
  NodeRecord record;
  int64_t lease = 0;
  int64_t mod_revision = 0;
};

class NodeDirectory {
 public:
  // `on_change(name, joined)`: a node appeared (or changed its record) or left.
  using ChangeFn = std::function<void(const std::string& name, bool present)>;
  NodeDirectory(EtcdClient* etcd, ClusterKeys keys, ChangeFn on_change = {});
  ~NodeDirectory();
  // Reads the nodes and starts watching; kUnavailable when etcd does not answer (retry later).
  Status Start();
  std::vector<NodeEntry> List() const;  // by name
  size_t size() const;
  bool watching() const;

 private:
  void Reload();
  void Apply(const std::vector<WatchEvent>& events);
  EtcdClient* etcd_;
  ClusterKeys keys_;
  ChangeFn on_change_;
  mutable std::mutex mu_;
  std::map<std::string, NodeEntry> nodes_;
  std::unique_ptr<EtcdWatch> watch_;
};

}  // namespace shoal::cluster
