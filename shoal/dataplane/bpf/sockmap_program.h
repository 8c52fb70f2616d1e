// SockmapProgram: the loaded data-plane BPF program (shoal_dataplane.bpf.c) with its SOCKHASH
// of endpoint sockets and its per-function counters, attached and pinned under a per-node
// directory for as long as the object lives. Loading needs CAP_BPF/CAP_NET_ADMIN (root).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shoal/common/status.h"
#include "shoal/dataplane/bpf/dataplane_abi.h"

struct shoal_dataplane;  // the bpftool skeleton (shoal_dataplane.skel.h)

namespace shoal {

// One function's slot in the fn_counters map (per CPU in the kernel; summed over CPUs by
// ReadCounters).
using FunctionCounters = shoal_fn_counters;

class SockmapProgram {
 public:
  // Mounts bpffs on /sys/fs/bpf when it is missing, loads the program, attaches it to the
  // SOCKHASH as its sk_msg verdict, and pins maps and program under `pin_dir` (created; pins
  // left by a crashed previous run are removed first).
  static Result<std::unique_ptr<SockmapProgram>> Load(const std::string& pin_dir);

  SockmapProgram(const SockmapProgram&) = delete;
  SockmapProgram& operator=(const SockmapProgram&) = delete;
  // Detaches the program, removes the pins and `pin_dir`.
  ~SockmapProgram();

  int sock_hash_fd() const;
  int counters_fd() const;
  int prog_fd() const;
  const std::string& pin_dir() const { return pin_dir_; }

  // Reads function `function_id`'s counters, summed over all possible CPUs.
  Result<FunctionCounters> ReadCounters(uint32_t function_id) const;

  // Slots in fn_counters (SHOAL_MAX_FUNCTIONS in the BPF program).
  static constexpr uint32_t kCounterSlots = SHOAL_MAX_FUNCTIONS;

  // Reserved endpoint key: the socket under it must have its sending side shut down
  // (shutdown(SHUT_WR)); the program sends descriptors for missing targets there so that the
  // sender's send() fails with EPIPE (see shoal_dataplane.bpf.c).
  static constexpr uint32_t kBounceEndpoint = SHOAL_BOUNCE_KEY;

  // Names of the pins under pin_dir().
  static constexpr const char* kSockHashPin = "sock_hash";
  static constexpr const char* kCountersPin = "fn_counters";
  static constexpr const char* kProgramPin = "shoal_redirect";

 private:
  explicit SockmapProgram(std::string pin_dir) : pin_dir_(std::move(pin_dir)) {}
  void Unpin();

  std::string pin_dir_;
  shoal_dataplane* skel_ = nullptr;
  bool attached_ = false;
  int num_cpus_ = 0;
};

}  // namespace shoal
