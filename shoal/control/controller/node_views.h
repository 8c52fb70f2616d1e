// What the controller shows of the nodes' own state (their functions' instances, load, cold
// starts): read from each node's control API (its record's `control` URL) with the caller's own
// bearer token, which the nodes accept because it is one of the cluster's. Nodes are asked in
// parallel; one that does not answer in time is named, not waited for.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shoal/control/cluster/node_directory.h"

namespace shoal::controller {

struct NodeAnswer {
  std::string node;
  bool ok = false;
  nlohmann::json body;  // the node's JSON answer when ok
  std::string error;    // why not, otherwise
};

// GET `path` on each of `nodes`' control APIs, with `authorization` (the caller's header).
std::vector<NodeAnswer> AskNodes(const std::vector<cluster::NodeEntry>& nodes,
                                 const std::string& path, const std::string& authorization);

// GET /v1/top over the cluster: every node's rows, each with its "node"; nodes that did not
// answer under "unreachable".
nlohmann::json ClusterTop(const std::vector<cluster::NodeEntry>& nodes,
                          const std::string& authorization);

// A function's live status over the nodes that run it (`nodes`): the counts summed, the worst
// p99, and every instance with its "node".
nlohmann::json ClusterFunctionStatus(const std::vector<cluster::NodeEntry>& nodes,
                                     const std::string& function, const std::string& authorization);

}  // namespace shoal::controller
