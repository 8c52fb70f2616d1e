// The event descriptor: the fixed-size message that travels on the data plane between the
// gateway, function instances and shoald. Payloads never travel with it: they stay in the
// tenant's shared-memory pool and the descriptor names them by offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shoal {

inline constexpr uint16_t kDescriptorVersion = 1;

enum class EventKind : uint16_t {
  kRequest = 1,   // gateway -> instance: run the handler on the payload
  kResponse = 2,  // instance -> gateway: the handler's answer (payload = response buffer)
  kError = 3,     // instance -> gateway: no payload, `status` holds the HTTP status
  kReady = 4,     // instance -> shoald: the handler is loaded, the instance takes requests
  kPing = 5,      // benchmarks and health probes: echoed back as kPong without touching memory
  kPong = 6,
  // instance -> gateway: one piece of a streamed answer. Its payload is a response buffer whose
  // head gives the status and content type and whose body is the piece; the request stays
  // pending, and the kResponse that follows ends the stream (its body, if any, is the last
  // piece). The gateway writes the pieces as HTTP chunks (gateway/connection_stream.cc).
  kResponseChunk = 7,
  // gateway -> instance: more of a request's body has landed in its buffer (`length`: the
  // buffer's bytes that are there now; the buffer is still the gateway's). The request's
  // kRequest follows on the same socket. No answer. An FL leaf folds the new bytes (a request
  // whose body is still arriving, fl_update_ingest.h).
  kBodyChunk = 8,
  // shoald -> instance: the FL job the instance's function follows (its SHOAL_INFER_FL_JOB)
  // committed version `request_id` on this node. No payload, no answer: a serving handler
  // fetches the new version now instead of at its next safety poll (Handler::OnJobCommitted).
  kJobCommitted = 9,
  // instance -> shoald's instance manager: the handler's own load (a language model's tokens in
  // flight, running and queued sequences), in the descriptor's fields (load_report.h). No payload,
  // no answer; shoald keeps the last one per instance for the autoscaler.
  kLoadReport = 10,
};

// kRequest's `status` when the request's client left before its body had arrived whole (after
// kBodyChunk descriptors): the handler drops what it began, nothing else.
inline constexpr uint32_t kStatusClientGone = 499;

// Endpoint keys. The first 4 bytes of a descriptor are the target key: the sk_msg program
// looks them up in the SOCKHASH (as SPRIGHT does), so `target` must stay the first field.
inline constexpr uint32_t kManagerEndpoint = 0xFFFF0000u;      // shoald's instance manager
inline constexpr uint32_t kGatewayEndpointBase = 0xFFFE0000u;  // + gateway loop index
inline constexpr uint32_t GatewayEndpoint(uint32_t loop) { return kGatewayEndpointBase + loop; }
inline constexpr bool IsGatewayEndpoint(uint32_t key) {
  return (key & 0xFFFF0000u) == kGatewayEndpointBase;
}

struct alignas(8) EventDescriptor {
  uint32_t target;        // endpoint key of the receiver (must be first: read by the BPF program)
  uint16_t version;       // kDescriptorVersion
  uint16_t kind;          // EventKind
  uint32_t function_id;   // index of the function in the BPF counters map
  uint32_t source;        // endpoint key of the sender; replies go there
  uint64_t request_id;    // opaque to everyone but the sender
  uint64_t offset;        // buffer offset in the tenant pool (0 = no payload)
  uint64_t length;        // bytes of payload used in that buffer
  uint32_t status;        // HTTP status for kResponse/kError
  float aux_value;        // kRequest: a number for the handler beside aux (FL: the update's weight)
  uint64_t timestamp_ns;  // sender's CLOCK_MONOTONIC at send time
  // kRequest: an auxiliary pool buffer, 0: none (FL: the partial sum). kResponse/kError: that
  // buffer again when the handler changed it though it answered with an error (FL: a refused
  // update partly folded; the coordinator rebuilds the partial sum), else 0.
  uint64_t aux_offset;
};

static_assert(sizeof(EventDescriptor) == 64, "the descriptor is one cache line on the wire");
static_assert(std::is_trivially_copyable_v<EventDescriptor>);
// The wire layout: every field's offset, so that a change to one is a deliberate one.
static_assert(offsetof(EventDescriptor, target) == 0);
static_assert(offsetof(EventDescriptor, version) == 4);
static_assert(offsetof(EventDescriptor, kind) == 6);
static_assert(offsetof(EventDescriptor, function_id) == 8);
static_assert(offsetof(EventDescriptor, source) == 12);
static_assert(offsetof(EventDescriptor, request_id) == 16);
static_assert(offsetof(EventDescriptor, offset) == 24);
static_assert(offsetof(EventDescriptor, length) == 32);
static_assert(offsetof(EventDescriptor, status) == 40);
static_assert(offsetof(EventDescriptor, aux_value) == 44 && sizeof(float) == 4);
static_assert(offsetof(EventDescriptor, timestamp_ns) == 48);
static_assert(offsetof(EventDescriptor, aux_offset) == 56);

inline constexpr size_t kDescriptorSize = sizeof(EventDescriptor);

}  // namespace shoal
