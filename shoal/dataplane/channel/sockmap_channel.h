// SockmapChannel: a descriptor channel on an endpoint's TCP loopback socket that sits in the
// sk_msg program's SOCKHASH. The kernel redirects each 64-byte send to the target endpoint's
// ingress queue, so user space never routes anything.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shoal/dataplane/channel/channel.h"

namespace shoal {

class SockmapChannel final : public DescriptorChannel {
 public:
  explicit SockmapChannel(int fd) : fd_(fd) {}  // takes ownership
  SockmapChannel(const SockmapChannel&) = delete;
  SockmapChannel& operator=(const SockmapChannel&) = delete;
  ~SockmapChannel() override;

  int fd() const override { return fd_; }
  // Errors: the target key is missing from the SOCKHASH -> the program redirects the message to
  // the shut-down bounce socket and send() fails with EPIPE -> kUnavailable (EACCES, a plain
  // SK_DROP, maps to kUnavailable too). The kernel could not charge the redirected
  // message to the target socket (ENOMEM: TCP memory pressure; the ingress queue has no
  // other bound) or the socket buffer is full (EAGAIN) -> kResourceExhausted.
  Status Send(const EventDescriptor& d) override;
  // Consecutive descriptors for the same target (up to kMaxBatch) go as one message, which the
  // program redirects whole and counts descriptor by descriptor: one lock, one queue entry and
  // one wake-up of the target for the run. The messages go in one sendmmsg. A message goes
  // whole or not at all; after a failed one its first descriptor is sent alone to learn why.
  size_t SendMany(std::span<const EventDescriptor> ds, Status* error) override;

  static constexpr size_t kMaxBatch = 64;     // descriptors per message (SHOAL_MAX_BATCH)
  static constexpr size_t kMaxMessages = 16;  // messages per sendmmsg
  Result<size_t> Receive(std::span<EventDescriptor> out) override;

 private:
  int fd_;
  // A descriptor split across two recv calls (TCP is a byte stream) waits here.
  alignas(8) unsigned char partial_[kDescriptorSize];
  size_t partial_len_ = 0;
};

}  // namespace shoal
