// SPDX-License-Identifier: GPL-2.0
// Shoal's data plane in the kernel: an sk_msg program on a SOCKHASH of endpoint sockets. Each
// 64-byte EventDescriptor written to an endpoint socket (alone, or with others for the same
// target in one message) is redirected straight into the ingress queue of the endpoint named by
// its first 4 bytes (`target`), and counted per function for the autoscaler. The layout it
// reads and the counters it writes are shoal/dataplane/bpf/dataplane_abi.h, which user space checks
// against the descriptor and its own types.

// The kernel's types (linux/bpf.h) come before libbpf's helpers, which use them.
// clang-format off
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
// clang-format on
#include "shoal/dataplane/bpf/dataplane_abi.h"

struct {
  __uint(type, BPF_MAP_TYPE_SOCKHASH);
  __uint(max_entries, 65536);
  __type(key, __u32);   /* endpoint key */
  __type(value, __u32); /* socket fd on update */
} sock_hash SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, SHOAL_MAX_FUNCTIONS);
  __type(key, __u32);
  __type(value, struct shoal_fn_counters);
} fn_counters SEC(".maps");

/* Counts the message's descriptors for their functions; with `drop`, only their drops. */
static __always_inline void count(void *data, void *data_end, __u32 n, int drop) {
  for (__u32 i = 0; i < SHOAL_MAX_BATCH; i++) {
    if (i >= n) break;
    void *d = data + i * SHOAL_DESCRIPTOR_SIZE;
    if (d + SHOAL_DESCRIPTOR_SIZE > data_end) break;
    __u32 function_id = *(__u32 *)(d + SHOAL_OFF_FUNCTION_ID);
    if (function_id >= SHOAL_MAX_FUNCTIONS) continue;
    struct shoal_fn_counters *c = bpf_map_lookup_elem(&fn_counters, &function_id);
    if (!c) continue;
    /* Per-CPU slot: plain increments, no atomics needed. */
    if (drop) {
      c->drops += 1;
      continue;
    }
    __u16 kind = *(__u16 *)(d + SHOAL_OFF_KIND);
    c->events += 1;
    if (kind == SHOAL_KIND_REQUEST) {
      c->requests += 1;
      c->bytes += *(__u64 *)(d + SHOAL_OFF_LENGTH);
    } else if (kind == SHOAL_KIND_RESPONSE || kind == SHOAL_KIND_ERROR) {
      c->responses += 1;
    }
  }
}

SEC("sk_msg")
int shoal_redirect(struct sk_msg_md *msg) {
  if (msg->size < SHOAL_DESCRIPTOR_SIZE) return SK_PASS;
  /* Several descriptors for one target may come in one message (SHOAL_MAX_BATCH). */
  __u32 n = msg->size / SHOAL_DESCRIPTOR_SIZE;
  if (n > SHOAL_MAX_BATCH) n = SHOAL_MAX_BATCH;
  __u32 span = n * SHOAL_DESCRIPTOR_SIZE;

  void *data = (void *)(long)msg->data;
  void *data_end = (void *)(long)msg->data_end;
  if (data + span > data_end) {
    /* The descriptors straddle scatterlist pages: make them linear. */
    if (bpf_msg_pull_data(msg, 0, span, 0) != 0) return SK_DROP;
    data = (void *)(long)msg->data;
    data_end = (void *)(long)msg->data_end;
  }
  if (data + SHOAL_DESCRIPTOR_SIZE > data_end) return SK_DROP;

  __u32 target = *(__u32 *)(data + SHOAL_OFF_TARGET);
  count(data, data_end, n, 0);

  if (target != SHOAL_BOUNCE_KEY &&
      bpf_msg_redirect_hash(msg, &sock_hash, &target, BPF_F_INGRESS) == SK_PASS)
    return SK_PASS;

  /* Unknown target: the sender must get an error. SK_DROP would give it EACCES, but the kernel
   * keeps a DROP verdict on the sending socket (psock->eval is only reset after PASS/REDIRECT,
   * tcp_bpf_send_verdict), so every later send on it would fail too. Instead redirect, egress,
   * to the bounce socket, whose sending side shoald has shut down: the redirect fails with
   * EPIPE, which the sender's send() returns, and the verdict is reset for the next message. */
  data = (void *)(long)msg->data;
  data_end = (void *)(long)msg->data_end;
  count(data, data_end, n, 1);
  __u32 bounce = SHOAL_BOUNCE_KEY;
  if (bpf_msg_redirect_hash(msg, &sock_hash, &bounce, 0) == SK_PASS) return SK_PASS;
  return SK_DROP; /* no bounce socket: EACCES, and this sending socket stays unusable */
}

char LICENSE[] SEC("license") = "GPL";
