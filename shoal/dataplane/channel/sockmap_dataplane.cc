#include "shoal/dataplane/channel/sockmap_dataplane.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shoal/dataplane/bpf/sockmap_program.h"
#include "shoal/dataplane/channel/sockmap_channel.h"

namespace shoal {

static_assert(SockmapProgram::kCounterSlots == kMaxFunctions,
              "fn_counters in the BPF program must hold kMaxFunctions slots");
static_assert(SockmapChannel::kMaxBatch == SHOAL_MAX_BATCH,
              "the program counts at most SHOAL_MAX_BATCH descriptors of a message");

namespace {

struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

bool SameAddress(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

}  // namespace

Result<std::unique_ptr<SockmapDataPlane>> SockmapDataPlane::Create(const NodeConfig& config) {
  std::unique_ptr<SockmapDataPlane> dp(new SockmapDataPlane());
  std::string root = config.bpf_pin_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  dp->pin_dir_ = root + "/" + config.node_name;

  auto program = SockmapProgram::Load(dp->pin_dir_);
  if (!program.ok()) return program.status();
  dp->program_ = std::move(program).value();

  FdCloser listener{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (listener.fd < 0) return ErrnoStatus("data plane listener socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus("bind data plane listener on 127.0.0.1", errno);
  }
  if (listen(listener.fd, 128) != 0) return ErrnoStatus("listen data plane listener", errno);
  dp->listen_fd_ = listener.release();
  auto bounce = dp->ConnectEndpoint(SockmapProgram::kBounceEndpoint);
  if (!bounce.ok()) return bounce.status();
  if (shutdown(bounce->fd(), SHUT_WR) != 0) return ErrnoStatus("shut down bounce socket", errno);
  dp->bounce_ = std::move(bounce).value();
  dp->description_ = "sk_msg program attached to a SOCKHASH, pinned at " + dp->pin_dir_;
  return dp;
}

SockmapDataPlane::~SockmapDataPlane() {
  if (listen_fd_ >= 0) close(listen_fd_);
}

Result<Endpoint> SockmapDataPlane::CreateEndpoint(uint32_t key) {
  if (key == SockmapProgram::kBounceEndpoint) {
    return InvalidArgument("endpoint key 0xffffffff is reserved by the sockmap data plane");
  }
  return ConnectEndpoint(key);
}

Result<Endpoint> SockmapDataPlane::ConnectEndpoint(uint32_t key) {
  std::lock_guard lock(mu_);
  sockaddr_in listen_addr{};
  socklen_t len = sizeof(listen_addr);
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&listen_addr), &len) != 0) {
    return ErrnoStatus("getsockname of the data plane listener", errno);
  }
  FdCloser client{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (client.fd < 0) return ErrnoStatus("endpoint socket", errno);
  int one = 1;
  setsockopt(client.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(client.fd, reinterpret_cast<sockaddr*>(&listen_addr), sizeof(listen_addr)) != 0) {
    return ErrnoStatus("connect endpoint to the data plane listener", errno);
  }
  sockaddr_in client_addr{};
  len = sizeof(client_addr);
  if (getsockname(client.fd, reinterpret_cast<sockaddr*>(&client_addr), &len) != 0) {
    return ErrnoStatus("getsockname of the endpoint", errno);
  }
  // Anyone on the host may connect to the loopback listener: accept until our own peer shows.
  FdCloser anchor;
  for (int attempt = 0; attempt < 64; ++attempt) {
    sockaddr_in peer{};
    len = sizeof(peer);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return ErrnoStatus("accept endpoint connection", errno);
    }
    if (SameAddress(peer, client_addr)) {
      anchor.fd = fd;
      break;
    }
    spdlog::warn("data plane listener: dropping a foreign connection from port {}",
                 ntohs(peer.sin_port));
    close(fd);
  }
  if (anchor.fd < 0) return Internal("data plane listener never accepted the endpoint");

  uint32_t value = static_cast<uint32_t>(client.fd);
  if (bpf_map_update_elem(program_->sock_hash_fd(), &key, &value, BPF_ANY) != 0) {
    return ErrnoStatus("insert endpoint " + std::to_string(key) + " into sock_hash", errno);
  }
  return Endpoint(key, client.release(), anchor.release());
}

void SockmapDataPlane::RemoveEndpoint(uint32_t key) {
  if (bpf_map_delete_elem(program_->sock_hash_fd(), &key) != 0 && errno != ENOENT) {
    spdlog::warn("remove endpoint {:#x} from sock_hash: {}", key, strerror(errno));
  }
}

std::optional<DataPlaneCounters> SockmapDataPlane::Counters(uint32_t function_id) {
  auto c = program_->ReadCounters(function_id);
  if (!c.ok()) {
    spdlog::warn("data plane counters of function {}: {}", function_id, c.status().ToString());
    return std::nullopt;
  }
  DataPlaneCounters out;
  out.events = c->events;
  out.bytes = c->bytes;
  out.inflight = static_cast<int64_t>(c->requests) - static_cast<int64_t>(c->responses);
  out.drops = c->drops;
  return out;
}

}  // namespace shoal
