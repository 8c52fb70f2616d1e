#include "shoal/dataplane/sockmap_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shoal {
namespace {

Status SendError(int err, uint32_t target) {
  switch (err) {
    case EPIPE:   // no socket under d.target: redirected to the bounce socket (or we are closed)
    case EACCES:  // the program dropped the message (no bounce socket)
      return Unavailable("no endpoint " + std::to_string(target) + " on the data plane (" +
                         strerror(err) + ")");
    case ECONNRESET:
    case ENOTCONN:
      return Unavailable("send to endpoint " + std::to_string(target) + ": " + strerror(err));
    case EAGAIN:
    case ENOMEM:
    case ENOBUFS:
      return ResourceExhausted("endpoint " + std::to_string(target) +
                               " cannot take more descriptors now: " + strerror(err));
    default:
      return ErrnoStatus("send to endpoint " + std::to_string(target), err);
  }
}

}  // namespace

SockmapChannel::~SockmapChannel() {
  if (fd_ >= 0) close(fd_);
}

Status SockmapChannel::Send(const EventDescriptor& d) {
  ssize_t n = send(fd_, &d, sizeof(d), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(sizeof(d))) return Status::Ok();
  if (n >= 0) {
    // Cannot happen for a redirected 64-byte message (the verdict covers all of it); a short
    // write would desynchronise the target's stream, so surface it as a bug.
    return Internal("short send on the data plane: " + std::to_string(n) + " of 64 bytes");
  }
  return SendError(errno, d.target);
}

Result<size_t> SockmapChannel::Receive(std::span<EventDescriptor> out) {
  if (out.empty()) return size_t{0};
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  const size_t capacity = out.size() * kDescriptorSize;
  size_t have = partial_len_;
  if (have > 0) std::memcpy(bytes, partial_, have);
  ssize_t n;
  do {
    n = recv(fd_, bytes + have, capacity - have, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Unavailable("data plane socket closed by its peer");
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      int err = errno;
      if (err == ECONNRESET || err == ENOTCONN || err == EPIPE) {
        return Unavailable(std::string("data plane socket: ") + strerror(err));
      }
      return ErrnoStatus("recv on the data plane", err);
    }
    n = 0;
  }
  have += static_cast<size_t>(n);
  const size_t whole = have / kDescriptorSize;
  partial_len_ = have % kDescriptorSize;
  if (partial_len_ > 0) std::memcpy(partial_, bytes + whole * kDescriptorSize, partial_len_);
  return whole;
}

}  // namespace shoal
