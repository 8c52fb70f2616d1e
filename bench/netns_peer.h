// What the cluster benches share: entering a test cluster node's network namespace, and (from
// tcp_connect.h) a TCP_NODELAY connection to an address there.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "tcp_connect.h"  // ConnectTcp

namespace shoal::bench {

// This thread joins the named network namespace (/var/run/netns/NAME); false if it cannot.
inline bool EnterNetns(const std::string& name) {
  const int fd = open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return ok;
}

}  // namespace shoal::bench
