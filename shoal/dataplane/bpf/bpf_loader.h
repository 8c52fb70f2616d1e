// What every loader of a BPF object (SockmapProgram, BehaviourProbes) does alike: libbpf's own
// messages (verifier output, load failures) through spdlog, its warnings as warnings, the rest at
// debug (RouteLibbpfLogs, called first); a failed load's status; the possible-CPU count and the
// sum of a per-CPU map's values.
#pragma once

#include <bpf/bpf.h>

#include <string>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::ebpf_internal {

// Sets libbpf's print callback once per process; later calls do nothing.
void RouteLibbpfLogs();

// A skeleton's load failing with errno `err`, as "what: <errno text>": PermissionDenied where the
// process lacks the privilege (EPERM, EACCES), errno's status otherwise.
Status LoadFailed(const std::string& what, int err);

// libbpf_num_possible_cpus(): how many values a per-CPU map's lookup writes.
Result<int> PossibleCpus();

// Reads `key`'s value in the per-CPU map `fd` (one T for each of num_cpus possible CPUs, as the
// kernel copies them out) and adds each CPU's into `sum` with add(sum, value). False, with errno
// set, when the lookup fails.
template <typename T, typename Add>
bool SumPerCpu(int fd, const void* key, int num_cpus, T& sum, Add add) {
  std::vector<T> per_cpu(static_cast<size_t>(num_cpus));
  if (bpf_map_lookup_elem(fd, key, per_cpu.data()) != 0) return false;
  for (const T& value : per_cpu) add(sum, value);
  return true;
}

}  // namespace shoal::ebpf_internal
