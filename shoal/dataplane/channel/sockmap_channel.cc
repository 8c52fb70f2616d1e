#include "shoal/dataplane/channel/sockmap_channel.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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

size_t SockmapChannel::SendMany(std::span<const EventDescriptor> ds, Status* error) {
  size_t done = 0;
  while (done < ds.size()) {
    // Runs of descriptors for one target, each one message (the program redirects a message
    // whole, to its first descriptor's target), up to kMaxMessages of them per sendmmsg.
    iovec iov[kMaxMessages];
    mmsghdr msgs[kMaxMessages];
    size_t first[kMaxMessages + 1];
    unsigned n = 0;
    size_t at = done;
    while (at < ds.size() && n < kMaxMessages) {
      size_t end = at + 1;
      while (end < ds.size() && end - at < kMaxBatch && ds[end].target == ds[at].target) ++end;
      iov[n] = {const_cast<EventDescriptor*>(&ds[at]), (end - at) * sizeof(EventDescriptor)};
      msgs[n] = {};
      msgs[n].msg_hdr.msg_iov = &iov[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
      first[n++] = at;
      at = end;
    }
    first[n] = at;
    int sent;
    do {
      sent = sendmmsg(fd_, msgs, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
      *error = SendError(errno, ds[done].target);
      return done;
    }
    for (int i = 0; i < sent; ++i) {
      if (msgs[i].msg_len != iov[i].iov_len) {
        // As in Send: a redirected message goes whole or not at all.
        *error = Internal("short send on the data plane: " + std::to_string(msgs[i].msg_len) +
                          " of " + std::to_string(iov[i].iov_len) + " bytes");
        return first[i];
      }
    }
    done = first[sent];
    if (static_cast<unsigned>(sent) < n) {
      // sendmmsg does not say why the next message did not go: its first descriptor alone says
      // (a message goes whole or not at all, so none of it went).
      if (Status st = Send(ds[done]); !st.ok()) {
        *error = std::move(st);
        return done;
      }
      ++done;
    }
  }
  return done;
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
