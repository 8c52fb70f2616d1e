#include "shoal/runtime/instance/zygote_protocol.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shoal {

namespace {
constexpr size_t kMaxFds = 8;
}  // namespace

Status SendPacket(int sock, const void* data, size_t len, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds) return InvalidArgument("zygote: at most 8 descriptors per message");
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EPIPE || errno == ECONNRESET) return Unavailable("zygote: peer closed the socket");
    return ErrnoStatus("zygote: sendmsg", errno);
  }
  return {};
}

Status ReceivePacket(int sock, void* data, size_t len, std::vector<int>* fds) {
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == ECONNRESET) return Unavailable("zygote: peer closed the socket");
  if (n < 0) return ErrnoStatus("zygote: recvmsg", errno);
  std::vector<int> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      got.push_back(fd);
    }
  }
  auto drop = [&] {
    for (int fd : got) close(fd);
  };
  if (n == 0) {
    drop();
    return Unavailable("zygote: peer closed the socket");
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || static_cast<size_t>(n) != len) {
    drop();
    return InvalidArgument("zygote: malformed message (" + std::to_string(n) + " bytes, want " +
                           std::to_string(len) + ")");
  }
  if (fds != nullptr) {
    *fds = std::move(got);
  } else {
    drop();
  }
  return {};
}

}  // namespace shoal
