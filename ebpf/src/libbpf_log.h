// libbpf's own messages (verifier output, load failures) through spdlog: its warnings as
// warnings, the rest at debug. Every loader of a BPF object calls RouteLibbpfLogs first.
#pragma once

namespace shoal::ebpf_internal {

// Sets libbpf's print callback once per process; later calls do nothing.
void RouteLibbpfLogs();

}  // namespace shoal::ebpf_internal
