#include "shoal/dataplane/channel/unix_dataplane.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "shoal/dataplane/channel/unix_dgram_channel.h"

namespace shoal {
namespace {

void SetBuffer(int fd, int force_opt, int opt, int bytes) {
  // SO_*BUFFORCE (CAP_NET_ADMIN) goes past net.core.[rw]mem_max; otherwise the kernel caps.
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
  }
}

}  // namespace

Result<std::unique_ptr<UnixDataPlane>> UnixDataPlane::Create(const NodeConfig& config,
                                                             std::string why) {
  socklen_t len = 0;
  auto addr = UnixEndpointAddress(config.node_name, 0, &len);
  if (!addr.ok()) return addr.status();
  std::unique_ptr<UnixDataPlane> dp(new UnixDataPlane());
  dp->node_name_ = config.node_name;
  dp->description_ = "unix datagram sockets (\\0shoal." + config.node_name + ".<key>): " + why;
  // The receiver's queue is bounded by datagram count, not bytes: a small value means senders
  // see kResourceExhausted under bursts.
  std::ifstream qlen("/proc/sys/net/unix/max_dgram_qlen");
  int max_qlen = 0;
  if (qlen >> max_qlen && max_qlen < 1024) {
    spdlog::warn(
        "net.unix.max_dgram_qlen is {}: each endpoint queues at most that many "
        "descriptors before senders get 'resource exhausted' (raise it with sysctl)",
        max_qlen);
  }
  return dp;
}

Result<Endpoint> UnixDataPlane::CreateEndpoint(uint32_t key) {
  socklen_t len = 0;
  auto addr = UnixEndpointAddress(node_name_, key, &len);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("endpoint socket", errno);
  SetBuffer(fd, SO_RCVBUFFORCE, SO_RCVBUF, kSocketBufferBytes);
  SetBuffer(fd, SO_SNDBUFFORCE, SO_SNDBUF, kSocketBufferBytes);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), len) != 0) {
    int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      return AlreadyExists("endpoint " + std::to_string(key) + " already exists on node " +
                           node_name_);
    }
    return ErrnoStatus("bind endpoint " + std::to_string(key), err);
  }
  return Endpoint(key, fd, -1);
}

void UnixDataPlane::RemoveEndpoint(uint32_t /*key*/) {}

}  // namespace shoal
