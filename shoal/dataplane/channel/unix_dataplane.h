// UnixDataPlane: endpoints are abstract AF_UNIX datagram sockets named after the node and the
// endpoint key; no kernel counters. The fallback where BPF cannot be loaded.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "shoal/dataplane/channel/dataplane.h"

namespace shoal {

class UnixDataPlane final : public DataPlane {
 public:
  // `why` says why this mode runs; it becomes Description().
  static Result<std::unique_ptr<UnixDataPlane>> Create(const NodeConfig& config, std::string why);

  DataPlaneKind kind() const override { return DataPlaneKind::kUnix; }
  Result<Endpoint> CreateEndpoint(uint32_t key) override;
  // The name disappears when the endpoint's last socket closes; nothing to unregister.
  void RemoveEndpoint(uint32_t key) override;
  std::optional<DataPlaneCounters> Counters(uint32_t) override { return std::nullopt; }
  const std::string& Description() const override { return description_; }

  // Socket buffer sizes asked for on each endpoint (the kernel caps them at rmem/wmem_max
  // unless we may force them).
  static constexpr int kSocketBufferBytes = 4 << 20;

 private:
  UnixDataPlane() = default;
  std::string node_name_;
  std::string description_;
};

}  // namespace shoal
