/* What the data-plane BPF program (shoal_dataplane.bpf.c) and user space agree on: where the
 * program reads a descriptor's fields, the event kinds it counts, the per-function counters
 * map's value and size, and the bounce endpoint. C, so that clang -target bpf includes it too;
 * user space checks every value against its own definitions (sockmap_program.cc). */
#ifndef SHOAL_EBPF_DATAPLANE_ABI_H_
#define SHOAL_EBPF_DATAPLANE_ABI_H_

#include <linux/types.h>

/* struct EventDescriptor (shoal/common/descriptor.h) on the wire. */
#define SHOAL_DESCRIPTOR_SIZE 64
#define SHOAL_OFF_TARGET 0      /* __u32 */
#define SHOAL_OFF_KIND 6        /* __u16 */
#define SHOAL_OFF_FUNCTION_ID 8 /* __u32 */
#define SHOAL_OFF_LENGTH 32     /* __u64 */

/* A message carries 1 to SHOAL_MAX_BATCH whole descriptors, all for the first one's target
 * (the sender groups them: SockmapChannel::SendMany); each is counted. */
#define SHOAL_MAX_BATCH 64

/* enum class EventKind */
#define SHOAL_KIND_REQUEST 1
#define SHOAL_KIND_RESPONSE 2
#define SHOAL_KIND_ERROR 3

/* Slots in fn_counters: kMaxFunctions (dataplane.h) and SockmapProgram::kCounterSlots. */
#define SHOAL_MAX_FUNCTIONS 4096

/* SockmapProgram::kBounceEndpoint: a socket whose sending side is shut down. */
#define SHOAL_BOUNCE_KEY 0xFFFFFFFFu

/* One function's slot in the per-CPU fn_counters map. */
struct shoal_fn_counters {
  __u64 events;    /* descriptors seen for the function (both directions) */
  __u64 bytes;     /* payload bytes named by its request descriptors */
  __u64 requests;  /* kind == Request */
  __u64 responses; /* kind == Response or Error */
  __u64 drops;     /* descriptors whose target endpoint was not in sock_hash */
};

#endif /* SHOAL_EBPF_DATAPLANE_ABI_H_ */
