/* What the behaviour probes (shoal_behaviour.bpf.c) and user space (behaviour_probes.cc, the
 * detector in shoal/security/detect/) agree on: the per-instance counters, keyed by the instance's
 * cgroup id, the syscall classes they are split into, and the discrete events (execve, connect,
 * open) sent through the ring buffer. C, so that clang -target bpf includes it too; user space
 * checks the sizes and the syscall numbers against its own (behaviour_probes.cc). */
#ifndef SHOAL_EBPF_BEHAVIOUR_ABI_H_
#define SHOAL_EBPF_BEHAVIOUR_ABI_H_

#include <linux/types.h>

/* Instances watched at once (entries of the `instances` map). */
#define SHOAL_BHV_MAX_INSTANCES 4096

/* Syscall classes: `syscall_class` maps a syscall number (< SHOAL_BHV_MAX_SYSCALL) to one;
 * numbers it does not list count as OTHER. */
#define SHOAL_BHV_CLASS_FILE 0    /* open, read, write, stat, ... on files */
#define SHOAL_BHV_CLASS_NET 1     /* socket, connect, send*, recv*, ... */
#define SHOAL_BHV_CLASS_PROCESS 2 /* clone, fork, execve, kill, wait, ... */
#define SHOAL_BHV_CLASS_MEMORY 3  /* mmap, munmap, mprotect, brk, madvise */
#define SHOAL_BHV_CLASS_SYNC 4    /* futex, epoll, poll, select, eventfd */
#define SHOAL_BHV_CLASS_TIME 5    /* clock_*, nanosleep, timer* */
#define SHOAL_BHV_CLASS_OTHER 6
#define SHOAL_BHV_CLASSES 7
#define SHOAL_BHV_MAX_SYSCALL 512

/* x86-64 syscall numbers the probes look into (checked against <sys/syscall.h>). */
#define SHOAL_BHV_NR_OPEN 2
#define SHOAL_BHV_NR_CONNECT 42
#define SHOAL_BHV_NR_EXECVE 59
#define SHOAL_BHV_NR_OPENAT 257
#define SHOAL_BHV_NR_EXECVEAT 322
#define SHOAL_BHV_NR_OPENAT2 437

/* How the probes find a task's instance: its cgroup in the v2 hierarchy, or in the v1 memory
 * hierarchy (every v1 instance cgroup has a memory directory). The id is the cgroup
 * directory's inode number (kernfs node id). Set in .rodata before the load. */
#define SHOAL_BHV_CGROUP_V2 0
#define SHOAL_BHV_CGROUP_V1_MEMORY 1

/* How the sys_enter probe is used (`syscall_hook` in .rodata): not loaded; attached all the
 * time (classes, every open, connect and execve with its argument); attached for a slice of
 * each scoring interval (classes and open attempts only; the rest from per-event hooks). */
#define SHOAL_BHV_SYSCALLS_OFF 0
#define SHOAL_BHV_SYSCALLS_ALWAYS 1
#define SHOAL_BHV_SYSCALLS_SAMPLED 2

/* One instance's value in the per-CPU `instances` map (summed over CPUs by user space). */
struct shoal_bhv_counters {
  __u64 syscalls[SHOAL_BHV_CLASSES];
  __u64 execs;       /* execve/execveat entered */
  __u64 connects;    /* connect entered */
  __u64 opens;       /* open/openat/openat2 entered (sys_enter always attached only) */
  __u64 forks;       /* processes and threads created */
  __u64 bytes_sent;  /* socket sends (sock_send_length tracepoint, bytes returned > 0) */
  __u64 bytes_recv;  /* socket receives (sock_recv_length) */
  __u64 cpu_ns;      /* on-CPU time, from sched_stat_runtime */
  __u64 events_lost; /* events the ring buffer had no room for */
};

/* Discrete events (`events` ring buffer). Each distinct (instance, kind, detail) is sent once:
 * a per-instance LRU set (`seen`) drops repeats; the counters above count every one. */
#define SHOAL_BHV_EV_EXEC 1
#define SHOAL_BHV_EV_CONNECT 2
#define SHOAL_BHV_EV_OPEN 3
#define SHOAL_BHV_DETAIL 204 /* the event is 240 bytes, no padding */

struct shoal_bhv_event {
  __u64 cgroup_id;
  __u32 kind;
  __u32 pid;
  __u16 family;                  /* connect: AF_INET, AF_INET6, AF_UNIX (detail holds the path) */
  __u16 port;                    /* connect: host byte order */
  __u8 addr[16];                 /* connect: IPv4 in the first 4 bytes, or IPv6 */
  char detail[SHOAL_BHV_DETAIL]; /* exec/open: the path as passed (NUL-terminated) */
};

#endif /* SHOAL_EBPF_BEHAVIOUR_ABI_H_ */
