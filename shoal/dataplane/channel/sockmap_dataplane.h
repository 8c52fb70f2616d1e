// SockmapDataPlane: endpoints are TCP loopback connections whose client sockets sit in the
// sk_msg program's SOCKHASH under their endpoint key; the accepted peers stay in shoald as
// anchors. The program and maps are pinned at <bpf_pin_root>/<node_name> while it lives.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "shoal/dataplane/channel/dataplane.h"

namespace shoal {

class SockmapProgram;

class SockmapDataPlane final : public DataPlane {
 public:
  // Loads and pins the BPF program and opens the loopback listener.
  static Result<std::unique_ptr<SockmapDataPlane>> Create(const NodeConfig& config);
  ~SockmapDataPlane() override;

  DataPlaneKind kind() const override { return DataPlaneKind::kSockmap; }
  Result<Endpoint> CreateEndpoint(uint32_t key) override;
  void RemoveEndpoint(uint32_t key) override;
  std::optional<DataPlaneCounters> Counters(uint32_t function_id) override;
  const std::string& Description() const override { return description_; }

  const std::string& pin_dir() const { return pin_dir_; }

 private:
  SockmapDataPlane() = default;
  Result<Endpoint> ConnectEndpoint(uint32_t key);

  std::unique_ptr<SockmapProgram> program_;
  std::string pin_dir_;
  std::string description_;
  int listen_fd_ = -1;
  // Registered under SockmapProgram::kBounceEndpoint with its sending side shut down: sends to
  // missing targets are redirected there and fail with EPIPE.
  Endpoint bounce_;
  std::mutex mu_;  // one connect/accept pair at a time, so the accepted peer is ours
};

}  // namespace shoal
