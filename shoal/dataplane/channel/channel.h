// A descriptor channel: one endpoint's socket on the data plane. The gateway's loops, the
// instance manager and every function instance each own one; `Send` delivers a descriptor to
// the endpoint named by its `target` field, whichever data plane runs underneath.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shoal/common/descriptor.h"
#include "shoal/common/status.h"

namespace shoal {

class DescriptorChannel {
 public:
  virtual ~DescriptorChannel() = default;
  // Readable when descriptors are waiting (poll it with epoll/libuv; never busy-poll).
  virtual int fd() const = 0;
  // Non-blocking send to d.target. Errors: kUnavailable when the target endpoint does not
  // exist (any more); kResourceExhausted when the target's queue is full right now (retry).
  virtual Status Send(const EventDescriptor& d) = 0;
  // Sends `ds` in order, each as Send would, in as few system calls as the channel can, and
  // returns how many went. Fewer than ds.size(): `*error` is why ds[returned] did not go (as
  // Send's errors), and nothing after it was tried. This one calls Send for each.
  virtual size_t SendMany(std::span<const EventDescriptor> ds, Status* error);
  // Non-blocking: fills `out` with whole descriptors waiting on the socket and returns how
  // many (0 when none is waiting). kUnavailable when the socket was closed.
  virtual Result<size_t> Receive(std::span<EventDescriptor> out) = 0;
};

// The kind of data plane, as passed to instances in SHOAL_DATAPLANE ("sockmap" or "unix").
enum class DataPlaneKind { kSockmap, kUnix };
const char* DataPlaneKindName(DataPlaneKind kind);
Result<DataPlaneKind> ParseDataPlaneKind(const std::string& name);

// Wraps an endpoint fd received from shoald (fd 3 in a function instance). Takes ownership.
// `node_name` scopes unix-mode addresses.
std::unique_ptr<DescriptorChannel> OpenChannel(int fd, DataPlaneKind kind,
                                               const std::string& node_name);

}  // namespace shoal
