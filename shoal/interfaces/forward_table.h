// Where a request goes when this node has no instance of its function (cluster mode): the
// gateway asks, and forwards the request to that node's gateway over a pooled TCP connection.
// Implemented in shoal/control/cluster/ (PeerRoutes, from the placements and nodes etcd holds);
// called on the gateway loops for each request whose function is not on this node, so it must be
// quick and thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace shoal {

struct ForwardTarget {
  std::string node;     // the node's name (metrics, error messages)
  std::string address;  // its gateway, "ipv4:port"
};

class ForwardTable {
 public:
  enum class Kind { kFunction, kModel, kJob };
  virtual ~ForwardTable() = default;
  // A node that runs `name` (a function, the function serving an OIP model, or an FL job: its
  // fleet routes and updates), picked in turn among those that run it; false when no other
  // live node does.
  virtual bool Pick(Kind kind, std::string_view name, ForwardTarget* out) = 0;
  // This node's name: a forwarded request carries it (X-Shoal-Forwarded-By), and a request that
  // carries one is never forwarded again.
  virtual const std::string& self() const = 0;
};

}  // namespace shoal
