#include <unistd.h>

#include <utility>

#include "shoal/dataplane/channel/dataplane.h"

namespace shoal {

Endpoint::Endpoint(Endpoint&& o) noexcept
    : key_(o.key_), fd_(std::exchange(o.fd_, -1)), anchor_fd_(std::exchange(o.anchor_fd_, -1)) {}

Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    if (anchor_fd_ >= 0) close(anchor_fd_);
    key_ = o.key_;
    fd_ = std::exchange(o.fd_, -1);
    anchor_fd_ = std::exchange(o.anchor_fd_, -1);
  }
  return *this;
}

Endpoint::~Endpoint() {
  if (fd_ >= 0) close(fd_);
  if (anchor_fd_ >= 0) close(anchor_fd_);
}

int Endpoint::ReleaseFd() { return std::exchange(fd_, -1); }

}  // namespace shoal
