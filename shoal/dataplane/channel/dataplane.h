// The node's data plane, as shoald sees it: it creates the endpoint sockets (one per gateway
// loop, one for the instance manager, one per function instance) and reads the per-function
// event counters. Two implementations: SockmapDataPlane (eBPF sk_msg redirect on a SOCKHASH
// between TCP loopback sockets) and UnixDataPlane (abstract unix datagram sockets), the
// fallback where BPF cannot be loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "shoal/common/config.h"
#include "shoal/common/status.h"
#include "shoal/dataplane/channel/channel.h"

namespace shoal {

// An endpoint's sockets, owned by shoald. `fd` is the endpoint's own socket: wrap it with
// OpenChannel in this process, or hand it to a child (dup2 to fd 3) and call ReleaseFd.
// `anchor_fd` (sockmap mode) is the TCP peer shoald keeps open so the endpoint's connection
// stays established; -1 in unix mode. The destructor closes what is still owned.
class Endpoint {
 public:
  Endpoint() = default;
  Endpoint(uint32_t key, int fd, int anchor_fd) : key_(key), fd_(fd), anchor_fd_(anchor_fd) {}
  Endpoint(Endpoint&& o) noexcept;
  Endpoint& operator=(Endpoint&& o) noexcept;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ~Endpoint();

  uint32_t key() const { return key_; }
  int fd() const { return fd_; }
  // Gives up ownership of fd() (after it was handed to a child or wrapped in a channel).
  int ReleaseFd();

 private:
  uint32_t key_ = 0;
  int fd_ = -1;
  int anchor_fd_ = -1;
};

struct DataPlaneCounters {
  uint64_t events = 0;   // descriptors redirected for the function (both directions)
  uint64_t bytes = 0;    // payload bytes named by its request descriptors
  int64_t inflight = 0;  // requests sent to its instances minus responses/errors back
  uint64_t drops = 0;    // descriptors whose target endpoint was missing
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  virtual DataPlaneKind kind() const = 0;
  // Creates endpoint `key` and registers it so descriptors with target == key reach it.
  virtual Result<Endpoint> CreateEndpoint(uint32_t key) = 0;
  // Unregisters endpoint `key` (its socket may already be closed).
  virtual void RemoveEndpoint(uint32_t key) = 0;
  // Kernel-side counters of function `function_id`; nullopt where the data plane keeps none
  // (unix mode: the gateway's own counters are the source there).
  virtual std::optional<DataPlaneCounters> Counters(uint32_t function_id) = 0;
  // Why this mode runs ("sk_msg program attached, pinned at ..." / "BPF unavailable: ...").
  virtual const std::string& Description() const = 0;
};

// Picks the data plane by config.dataplane: sockmap, unix, or auto (sockmap when the BPF
// program loads, unix otherwise, with the reason in Description()). An explicit `sockmap`
// that cannot load is an error.
Result<std::unique_ptr<DataPlane>> CreateDataPlane(const NodeConfig& config);

// Max function ids the BPF counter map holds.
inline constexpr uint32_t kMaxFunctions = 4096;

}  // namespace shoal
