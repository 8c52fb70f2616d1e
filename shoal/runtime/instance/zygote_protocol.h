// The control socket between shoald and a function's zygote: a shoal-fn started with
// SHOAL_ZYGOTE=1 that has done everything an instance does before its first request (handler
// loaded, pool attached) and then forks one child per instance start. A SOCK_SEQPACKET pair,
// the zygote's end as its fd 5; one message per packet, descriptors by SCM_RIGHTS.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

inline constexpr int kZygoteControlFd = 5;
inline constexpr uint32_t kZygoteMagic = 0x5a59474f;  // "ZYGO"

enum class ZygoteMessage : uint32_t {
  kReady = 1,       // zygote -> shoald: loaded, single-threaded, forks on request
  kFailed = 2,      // zygote -> shoald: the handler (or the pool) failed to load; it exits
  kUnforkable = 3,  // zygote -> shoald: loaded but not single-threaded: it cannot fork safely
  kFork = 4,        // shoald -> zygote: fork a child (see ZygoteFork)
  kForked = 5,      // zygote -> shoald: the child's pid and its start socket, or the errno
  kExited = 6,      // zygote -> shoald: a child has exited (pid, wait status in `err`)
  kStart = 7,       // shoald -> a forked child, on its start socket: become this instance
};

// kFork: the zygote forks a child and answers kForked with the child's pid and, by
// SCM_RIGHTS, shoald's end of a socket pair whose other end only the child holds. The child
// waits there: shoald checks it, moves it into the instance's cgroup and sends kStart with the
// per-instance part; end of file before that means "do not run" and it exits. shoald may fork
// a child ahead of demand (a spare) and start it when an instance is needed. The socket then
// stays open as the instance's lifeline: its end of file means shoald is gone.
struct ZygoteFork {
  uint32_t magic = kZygoteMagic;
  ZygoteMessage type = ZygoteMessage::kFork;
};

// kStart carries, in this order, the instance's data-plane socket and its stdout and stderr
// (the write ends of shoald's log pipes).
struct ZygoteStart {
  uint32_t magic = kZygoteMagic;
  ZygoteMessage type = ZygoteMessage::kStart;
  uint32_t endpoint = 0;  // the instance's data-plane key
  uint32_t slot = 0;      // its pool holder slot
};
inline constexpr size_t kZygoteStartFds = 3;

struct ZygoteReply {
  uint32_t magic = kZygoteMagic;
  ZygoteMessage type = ZygoteMessage::kReady;
  int32_t pid = 0;         // kForked, kExited: the child
  int32_t err = 0;         // kForked: errno of a failed fork; kExited: its wait status
  char message[232] = {};  // kFailed / kUnforkable: why (NUL-terminated)
};

// One packet with up to 8 descriptors. Errors are values; EOF on receive is kUnavailable.
Status SendPacket(int sock, const void* data, size_t len, const std::vector<int>& fds);
// Receives one packet of exactly `len` bytes; its descriptors (close-on-exec) go to *fds.
Status ReceivePacket(int sock, void* data, size_t len, std::vector<int>* fds);

}  // namespace shoal
