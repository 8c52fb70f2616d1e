#include "shoal/dataplane/channel/unix_dgram_channel.h"

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace shoal {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void WriteKey(char* at, uint32_t key) {
  for (int i = 7; i >= 0; --i) {
    at[i] = kHex[key & 0xF];
    key >>= 4;
  }
}

}  // namespace

Result<sockaddr_un> UnixEndpointAddress(const std::string& node_name, uint32_t key,
                                        socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string prefix = "shoal." + node_name + ".";
  // sun_path[0] = '\0' (abstract), then the name, no terminator.
  if (1 + prefix.size() + 8 > sizeof(addr.sun_path)) {
    return InvalidArgument("node name '" + node_name + "' is too long for a unix socket name");
  }
  std::memcpy(addr.sun_path + 1, prefix.data(), prefix.size());
  WriteKey(addr.sun_path + 1 + prefix.size(), key);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + prefix.size() + 8);
  return addr;
}

UnixDgramChannel::UnixDgramChannel(int fd, const std::string& node_name) : fd_(fd) {
  socklen_t len = 0;
  auto addr = UnixEndpointAddress(node_name, 0, &len);
  if (addr.ok()) {
    addr_ = *addr;
    addr_len_ = len;
    key_pos_ = len - offsetof(sockaddr_un, sun_path) - 8;
  }
}

UnixDgramChannel::~UnixDgramChannel() {
  if (fd_ >= 0) close(fd_);
}

Status UnixDgramChannel::Send(const EventDescriptor& d) {
  if (addr_len_ == 0) return InvalidArgument("node name too long for a unix socket name");
  WriteKey(addr_.sun_path + key_pos_, d.target);
  ssize_t n;
  do {
    n = sendto(fd_, &d, sizeof(d), MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&addr_), addr_len_);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(d))) return Status::Ok();
  if (n >= 0) return Internal("short datagram send: " + std::to_string(n) + " of 64 bytes");
  const int err = errno;
  switch (err) {
    case ECONNREFUSED:  // nothing bound to the name (any more)
    case ENOENT:
    case ECONNRESET:
      return Unavailable("no endpoint " + std::to_string(d.target) + " on the data plane");
    case EAGAIN:
    case ENOBUFS:
    case ENOMEM:
      return ResourceExhausted("endpoint " + std::to_string(d.target) +
                               " cannot take more descriptors now: " + strerror(err));
    default:
      return ErrnoStatus("sendto endpoint " + std::to_string(d.target), err);
  }
}

Result<size_t> UnixDgramChannel::Receive(std::span<EventDescriptor> out) {
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = recv(fd_, &out[got], sizeof(EventDescriptor), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (got > 0) break;  // report what we have; the error shows again on the next call
      const int err = errno;
      if (err == EBADF || err == ENOTCONN) return Unavailable("data plane socket closed");
      return ErrnoStatus("recv on the data plane", err);
    }
    // Datagrams are whole descriptors by construction; anything else is not ours: skip it.
    if (n == static_cast<ssize_t>(sizeof(EventDescriptor))) ++got;
  }
  return got;
}

}  // namespace shoal
