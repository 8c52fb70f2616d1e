#include "shoal/dataplane/gateway/gateway.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "shoal/common/log.h"
#include "shoal/dataplane/gateway/control_worker.h"
#include "shoal/dataplane/gateway/gateway_loop.h"

namespace shoal {

// ---- Gateway -------------------------------------------------------------------------------

Gateway::Gateway(const NodeConfig& config, FunctionTable& functions, DataPlane& dataplane,
                 ScaleSignal& scale, NodeMetrics& metrics, GatewayHooks hooks)
    : config_(config),
      functions_(functions),
      dataplane_(dataplane),
      scale_(scale),
      metrics_(metrics),
      hooks_(std::move(hooks)) {}

Gateway::~Gateway() { Stop(); }

uint32_t Gateway::loops() const { return static_cast<uint32_t>(loops_.size()); }

namespace {

Result<int> BindListener(const std::string& host, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return InvalidArgument("listen_host: not an IPv4 address: " + host);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus("bind " + host + ":" + std::to_string(port), err);
  }
  return fd;
}

}  // namespace

Status Gateway::Start() {
  uint32_t n = config_.gateway_threads;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  uint16_t port = config_.listen_port;
  for (uint32_t i = 0; i < n; ++i) {
    auto fd = BindListener(config_.listen_host, port);
    if (!fd.ok()) return fd.status();
    if (port == 0) {
      sockaddr_in addr{};
      socklen_t len = sizeof addr;
      getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
      port = ntohs(addr.sin_port);
    }
    auto endpoint = dataplane_.CreateEndpoint(GatewayEndpoint(i));
    if (!endpoint.ok()) {
      close(*fd);
      return endpoint.status();
    }
    auto loop = std::make_unique<GatewayLoop>(*this, i);
    SHOAL_RETURN_IF_ERROR(loop->Init(*fd, std::move(*endpoint)));
    loops_.push_back(std::move(loop));
  }
  port_ = port;
  if (hooks_.control != nullptr) {
    // As many control threads as loops (two at least): a slow evaluation holds one of them,
    // never a loop, and the others keep answering.
    control_worker_ = std::make_unique<ControlWorker>(
        *hooks_.control, std::max<uint32_t>(2, n), [this](const ControlCall& call, HttpReply r) {
          loops_[call.loop]->Post({InboxItem::Kind::kControlReply,
                                   call.request_id,
                                   0,
                                   0,
                                   {},
                                   std::make_unique<HttpReply>(std::move(r))});
        });
    control_worker_->Start();
  }
  for (auto& loop : loops_) loop->Start();
  spdlog::info(
      "gateway: listening on {}:{} with {} event loops (SO_REUSEPORT), data plane {}, "
      "{} control threads for the fleet routes",
      config_.listen_host, port_, n, DataPlaneKindName(dataplane_.kind()),
      control_worker_ ? control_worker_->threads() : 0);
  return {};
}

void Gateway::Stop() {
  // The control threads first: a reply they post needs its loop alive.
  if (control_worker_) control_worker_->Stop();
  for (auto& loop : loops_) loop->Stop();
  loops_.clear();
  control_worker_.reset();
}

void Gateway::Deliver(const RouteAssignment& a) {
  if (a.loop < loops_.size()) {
    loops_[a.loop]->Post({InboxItem::Kind::kAssign, a.request_id, a.instance, 0, {}, {}});
  }
}

void Gateway::Reject(uint32_t loop, uint64_t request_id, int http_status, std::string reason) {
  if (loop < loops_.size()) {
    loops_[loop]->Post(
        {InboxItem::Kind::kReject, request_id, 0, http_status, std::move(reason), {}});
  }
}

void Gateway::FailInstance(uint32_t instance, int http_status, std::string reason) {
  for (auto& loop : loops_) {
    loop->Post({InboxItem::Kind::kFailInstance, 0, instance, http_status, reason, {}});
  }
}

}  // namespace shoal
