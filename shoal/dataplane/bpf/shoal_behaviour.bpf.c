// SPDX-License-Identifier: GPL-2.0
// Shoal's behaviour probes: what each function instance does, counted per instance (keyed by
// the id of its cgroup) for the compromise detector (shoal/security/detect/). Only instances user
// space has registered in `instances` are counted; every other task returns after one lookup.
//   tp_btf/sys_enter           syscalls by class; execve, connect and open with their argument
//                              (optional: every syscall of the node pays for this hook while it
//                              is attached; sampled: attached for a slice of each interval,
//                              counting classes and reporting open attempts only)
//   tp_btf/inet_sock_set_state without sys_enter: TCP connects and their destination
//   tp_btf/sched_process_exec  the program an execve ran (its path from kernel memory)
//   tp_btf/sched_stat_runtime  CPU time (every scheduler tick and switch of a running task)
//   tp_btf/sched_process_fork  processes and threads created
//   tp_btf/sock_send_length, tp_btf/sock_recv_length   socket bytes
// BTF-typed raw tracepoints (tp_btf) and CO-RE: nothing needs tracefs, the kernel types below
// are relocated against the running kernel's BTF, and kernel pointers are walked with plain
// loads the verifier checks (no helper call per level: every syscall of the node pays it). The
// layout user space reads is shoal/dataplane/bpf/behaviour_abi.h.

// The kernel's types (linux/bpf.h) come before libbpf's helpers, which use them.
// clang-format off
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
// clang-format on
#include "shoal/dataplane/bpf/behaviour_abi.h"

/* The kernel's types, as far as the probes read them (CO-RE: offsets come from kernel BTF). */
struct kernfs_node {
  __u64 id;
} __attribute__((preserve_access_index));
struct cgroup {
  struct kernfs_node *kn;
} __attribute__((preserve_access_index));
struct cgroup_subsys_state {
  struct cgroup *cgroup;
} __attribute__((preserve_access_index));
struct css_set {
  struct cgroup_subsys_state *subsys[16];
  struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));
struct linux_binprm {
  const char *filename;
} __attribute__((preserve_access_index));
struct in6_addr___shoal {
  __u8 s6_addr[16];
};
struct sock_common {
  unsigned short skc_family;
  __u16 skc_dport;
  __u32 skc_daddr;
  struct in6_addr___shoal skc_v6_daddr;
} __attribute__((preserve_access_index));
struct sock {
  struct sock_common __sk_common;
} __attribute__((preserve_access_index));
struct task_struct {
  int tgid;
  struct css_set *cgroups;
} __attribute__((preserve_access_index));
struct pt_regs {
  unsigned long di;
  unsigned long si;
  unsigned long dx;
} __attribute__((preserve_access_index));
enum cgroup_subsys_id { memory_cgrp_id = 4 };

const volatile __u32 cgroup_mode = SHOAL_BHV_CGROUP_V2;
/* How sys_enter is used (user space's choice, SHOAL_BHV_SYSCALLS_*): always attached, it counts
 * and reports everything it sees. Off, TCP connects are counted and reported from
 * inet_sock_set_state and execs from sched_process_exec, and syscall classes and opens are not
 * seen. Sampled (attached for a slice of each interval only), it counts syscall classes and
 * reports open attempts, while execs, connects and opens are counted by the per-event hooks
 * (opens by user space's fanotify). */
const volatile __u32 syscall_hook = SHOAL_BHV_SYSCALLS_ALWAYS;

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, SHOAL_BHV_MAX_INSTANCES);
  __type(key, __u64); /* cgroup id */
  __type(value, struct shoal_bhv_counters);
} instances SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, SHOAL_BHV_MAX_SYSCALL);
  __type(key, __u32);
  __type(value, __u32); /* SHOAL_BHV_CLASS_* */
} syscall_class SEC(".maps");

struct seen_key {
  __u64 cgroup_id;
  __u64 hash; /* kind and detail */
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, struct seen_key);
  __type(value, __u8);
} seen SEC(".maps");

/* Process (tgid) -> its instance's cgroup id: every process a watched instance forks (user
 * space adds each instance's own), so that user space can tell whose an event it sees by pid
 * only (fanotify's opens) is, even after the process exited. Removed with the instance. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u64);
} pids SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* The instance cgroup id of `task` (v2: its default-hierarchy cgroup; v1: its memory one).
 * BTF-typed programs (tp_btf) walk kernel pointers with plain loads (the verifier checks them
 * against the kernel's BTF; a fault reads 0): no helper call per level, which a syscall pays. */
static __always_inline __u64 task_cgroup_id(struct task_struct *task) {
  struct css_set *cgroups = task->cgroups;
  if (!cgroups) return 0;
  if (cgroup_mode == SHOAL_BHV_CGROUP_V2) {
    struct cgroup *dfl = cgroups->dfl_cgrp;
    if (!dfl || !dfl->kn) return 0;
    return dfl->kn->id;
  }
  struct cgroup_subsys_state *css =
      cgroups->subsys[bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id)];
  if (!css || !css->cgroup || !css->cgroup->kn) return 0;
  return css->cgroup->kn->id;
}

static __always_inline __u64 current_cgroup_id(void) {
  if (cgroup_mode == SHOAL_BHV_CGROUP_V2) return bpf_get_current_cgroup_id();
  return task_cgroup_id(bpf_get_current_task_btf());
}

static __always_inline struct shoal_bhv_counters *current_instance(__u64 *cgid) {
  *cgid = current_cgroup_id();
  if (*cgid == 0) return 0;
  return bpf_map_lookup_elem(&instances, cgid);
}

static __always_inline __u64 fnv1a(__u64 h, const __u8 *p, __u32 n) {
  for (__u32 i = 0; i < n && i < SHOAL_BHV_DETAIL; i++) {
    if (p[i] == 0) break;
    h = (h ^ p[i]) * 1099511628211ULL;
  }
  return h;
}

/* Sends `ev` unless this instance already sent the same (kind, hash). */
static __always_inline void submit_once(struct shoal_bhv_event *ev, __u64 hash) {
  struct seen_key k = {.cgroup_id = ev->cgroup_id, .hash = hash * 31 + ev->kind};
  __u8 one = 1;
  if (bpf_map_lookup_elem(&seen, &k)) {
    bpf_ringbuf_discard(ev, 0);
    return;
  }
  bpf_map_update_elem(&seen, &k, &one, BPF_ANY);
  bpf_ringbuf_submit(ev, 0);
}

/* An event of `kind` for this instance, zeroed but for its header; none (and a lost event
 * counted) when the ring buffer is full. */
static __always_inline struct shoal_bhv_event *new_event(struct shoal_bhv_counters *c, __u64 cgid,
                                                         __u32 kind) {
  struct shoal_bhv_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
  if (!ev) {
    c->events_lost += 1;
    return 0;
  }
  __builtin_memset(ev, 0, sizeof(*ev));
  ev->cgroup_id = cgid;
  ev->kind = kind;
  ev->pid = bpf_get_current_pid_tgid() >> 32;
  return ev;
}

/* The hash that sends an IP connect's event once, whichever hook saw it: family, port and the
 * 16 address bytes (an IPv4 address in the first 4, the rest zero). */
static __always_inline __u64 inet_connect_hash(const struct shoal_bhv_event *ev) {
  __u64 h = 14695981039346656037ULL ^ ev->family;
  h = (h ^ ev->port) * 1099511628211ULL;
#pragma unroll
  for (int i = 0; i < 16; i++) h = (h ^ ev->addr[i]) * 1099511628211ULL;
  return h;
}

/* A path event; `user` says where the path is. A user path whose page is not resident cannot
 * be read here (no page faults in this context): no event then (the counter still counts it;
 * an execve's path comes again from sched_process_exec, out of kernel memory). */
static __always_inline void path_event(struct shoal_bhv_counters *c, __u64 cgid, __u32 kind,
                                       const void *path, int user) {
  struct shoal_bhv_event *ev = new_event(c, cgid, kind);
  if (!ev) return;
  long n = user ? bpf_probe_read_user_str(ev->detail, sizeof(ev->detail), path)
                : bpf_probe_read_kernel_str(ev->detail, sizeof(ev->detail), path);
  if (n <= 1) {
    bpf_ringbuf_discard(ev, 0);
    return;
  }
  submit_once(ev, fnv1a(14695981039346656037ULL, (const __u8 *)ev->detail, SHOAL_BHV_DETAIL));
}

static __always_inline void connect_event(struct shoal_bhv_counters *c, __u64 cgid,
                                          const void *user_addr) {
  __u16 family = 0;
  if (bpf_probe_read_user(&family, sizeof(family), user_addr) != 0) return;
  if (family != 2 && family != 10 && family != 1) return; /* AF_INET, AF_INET6, AF_UNIX */
  struct shoal_bhv_event *ev = new_event(c, cgid, SHOAL_BHV_EV_CONNECT);
  if (!ev) return;
  ev->family = family;
  __u64 h;
  if (family == 1) {
    bpf_probe_read_user_str(ev->detail, 108, (const char *)user_addr + 2);
    h = fnv1a(14695981039346656037ULL ^ family, (const __u8 *)ev->detail, 108);
  } else {
    __u16 port_be = 0;
    bpf_probe_read_user(&port_be, sizeof(port_be), (const char *)user_addr + 2);
    ev->port = __builtin_bswap16(port_be);
    if (family == 2) {
      bpf_probe_read_user(ev->addr, 4, (const char *)user_addr + 4);
    } else {
      bpf_probe_read_user(ev->addr, 16, (const char *)user_addr + 8);
    }
    h = inet_connect_hash(ev);
  }
  submit_once(ev, h);
}

/* The user path an execve/open-family syscall names: its first argument, the *at forms' second. */
static __always_inline const void *path_arg(__u32 nr, struct pt_regs *regs) {
  if (nr == SHOAL_BHV_NR_EXECVE || nr == SHOAL_BHV_NR_OPEN) return (const void *)regs->di;
  return (const void *)regs->si;
}

SEC("tp_btf/sys_enter")
int shoal_bhv_sys_enter(__u64 *ctx) {
  __u64 cgid;
  struct shoal_bhv_counters *c = current_instance(&cgid);
  if (!c) return 0;
  __u32 nr = (__u32)ctx[1];
  __u32 cls = SHOAL_BHV_CLASS_OTHER;
  if (nr < SHOAL_BHV_MAX_SYSCALL) {
    __u32 *v = bpf_map_lookup_elem(&syscall_class, &nr);
    if (v && *v < SHOAL_BHV_CLASSES) cls = *v;
  }
  if (cls < SHOAL_BHV_CLASSES) c->syscalls[cls] += 1; /* per-CPU value: no atomics needed */

  struct pt_regs *regs = (struct pt_regs *)ctx[0];
  const int is_open =
      nr == SHOAL_BHV_NR_OPEN || nr == SHOAL_BHV_NR_OPENAT || nr == SHOAL_BHV_NR_OPENAT2;
  if (syscall_hook == SHOAL_BHV_SYSCALLS_SAMPLED) {
    /* A slice: classes, and the open attempts (fanotify sees only the opens that succeed). */
    if (is_open) path_event(c, cgid, SHOAL_BHV_EV_OPEN, path_arg(nr, regs), 1);
    return 0;
  }
  if (is_open) {
    c->opens += 1;
    path_event(c, cgid, SHOAL_BHV_EV_OPEN, path_arg(nr, regs), 1);
    return 0;
  }
  switch (nr) {
    case SHOAL_BHV_NR_EXECVE:
    case SHOAL_BHV_NR_EXECVEAT:
      c->execs += 1;
      path_event(c, cgid, SHOAL_BHV_EV_EXEC, path_arg(nr, regs), 1);
      break;
    case SHOAL_BHV_NR_CONNECT:
      c->connects += 1;
      connect_event(c, cgid, (const void *)regs->si);
      break;
    default:
      break;
  }
  return 0;
}

/* A TCP connect's SYN_SENT (process context: current is the connecting task). Only without the
 * always-attached sys_enter hook: a per-event hook, so that no other syscall pays for it. */
SEC("tp_btf/inet_sock_set_state")
int shoal_bhv_tcp_connect(__u64 *ctx) {
  if (syscall_hook == SHOAL_BHV_SYSCALLS_ALWAYS || (int)ctx[2] != 2 /* TCP_SYN_SENT */) return 0;
  __u64 cgid;
  struct shoal_bhv_counters *c = current_instance(&cgid);
  if (!c) return 0;
  c->connects += 1;
  struct sock *sk = (struct sock *)ctx[0];
  struct shoal_bhv_event *ev = new_event(c, cgid, SHOAL_BHV_EV_CONNECT);
  if (!ev) return 0;
  __u16 family = sk->__sk_common.skc_family;
  ev->family = family;
  ev->port = __builtin_bswap16(sk->__sk_common.skc_dport);
  if (family == 2) {
    __u32 a = sk->__sk_common.skc_daddr;
    __builtin_memcpy(ev->addr, &a, 4);
  } else {
    bpf_probe_read_kernel(ev->addr, 16, &sk->__sk_common.skc_v6_daddr);
  }
  submit_once(ev, inet_connect_hash(ev)); /* connect_event's: either path's is sent once */
  return 0;
}

SEC("tp_btf/sched_process_exec")
int shoal_bhv_exec(__u64 *ctx) {
  __u64 cgid;
  struct shoal_bhv_counters *c = current_instance(&cgid);
  if (!c) return 0;
  /* Always attached, sys_enter counted the attempts. */
  if (syscall_hook != SHOAL_BHV_SYSCALLS_ALWAYS) c->execs += 1;
  struct linux_binprm *bprm = (struct linux_binprm *)ctx[2];
  path_event(c, cgid, SHOAL_BHV_EV_EXEC, bprm->filename, 0);
  return 0;
}

SEC("tp_btf/sched_stat_runtime")
int shoal_bhv_runtime(__u64 *ctx) {
  /* The task that ran (not necessarily current: update_curr may run for another CPU's task). */
  struct task_struct *task = (struct task_struct *)ctx[0];
  __u64 cgid = task_cgroup_id(task);
  if (cgid == 0) return 0;
  struct shoal_bhv_counters *c = bpf_map_lookup_elem(&instances, &cgid);
  if (c) __sync_fetch_and_add(&c->cpu_ns, ctx[1]);
  return 0;
}

SEC("tp_btf/sched_process_fork")
int shoal_bhv_fork(__u64 *ctx) {
  __u64 cgid;
  struct shoal_bhv_counters *c = current_instance(&cgid);
  if (!c) return 0;
  c->forks += 1;
  struct task_struct *child = (struct task_struct *)ctx[1];
  __u32 tgid = (__u32)child->tgid; /* a thread's is its process's: the same entry */
  bpf_map_update_elem(&pids, &tgid, &cgid, BPF_ANY);
  return 0;
}

/* sock_send_length / sock_recv_length: ctx[1] is the call's result, the bytes when positive. */
static __always_inline void count_socket_bytes(__u64 *ctx, int sent) {
  int ret = (int)ctx[1];
  if (ret <= 0) return;
  __u64 cgid;
  struct shoal_bhv_counters *c = current_instance(&cgid);
  if (!c) return;
  if (sent) {
    c->bytes_sent += (__u64)ret;
  } else {
    c->bytes_recv += (__u64)ret;
  }
}

SEC("tp_btf/sock_send_length")
int shoal_bhv_send(__u64 *ctx) {
  count_socket_bytes(ctx, 1);
  return 0;
}

SEC("tp_btf/sock_recv_length")
int shoal_bhv_recv(__u64 *ctx) {
  count_socket_bytes(ctx, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
