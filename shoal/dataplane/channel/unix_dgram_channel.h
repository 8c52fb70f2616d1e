// UnixDgramChannel: a descriptor channel on an abstract AF_UNIX datagram socket, the data
// plane where BPF cannot be loaded. Each descriptor is one datagram sent to the target's
// abstract address "\0shoal.<node_name>.<key as 8 hex digits>".
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdint>
#include <string>

#include "shoal/dataplane/channel/channel.h"

namespace shoal {

// The abstract address of endpoint `key` on node `node_name`; `len` gets the sockaddr length.
// Fails when the name does not fit in sun_path.
Result<sockaddr_un> UnixEndpointAddress(const std::string& node_name, uint32_t key, socklen_t* len);

class UnixDgramChannel final : public DescriptorChannel {
 public:
  UnixDgramChannel(int fd, const std::string& node_name);  // takes ownership of fd
  UnixDgramChannel(const UnixDgramChannel&) = delete;
  UnixDgramChannel& operator=(const UnixDgramChannel&) = delete;
  ~UnixDgramChannel() override;

  int fd() const override { return fd_; }
  // Errors: no socket bound to the target's name -> ECONNREFUSED (ENOENT) -> kUnavailable;
  // the target's queue holds net.unix.max_dgram_qlen datagrams or our send buffer is full ->
  // EAGAIN -> kResourceExhausted.
  Status Send(const EventDescriptor& d) override;
  Result<size_t> Receive(std::span<EventDescriptor> out) override;

 private:
  int fd_;
  sockaddr_un addr_{};      // prefix filled once; Send writes the 8 key digits
  socklen_t addr_len_ = 0;  // 0 when node_name does not fit
  size_t key_pos_ = 0;      // index of the first key digit in sun_path
};

}  // namespace shoal
