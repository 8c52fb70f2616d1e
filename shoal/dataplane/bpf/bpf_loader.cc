#include "shoal/dataplane/bpf/bpf_loader.h"

#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string_view>

namespace shoal::ebpf_internal {
namespace {

int LibbpfPrint(enum libbpf_print_level level, const char* fmt, va_list args) {
  char buf[1024];
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  std::string_view line(buf, n < 0 ? 0 : std::min<size_t>(n, sizeof(buf) - 1));
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (level == LIBBPF_WARN) {
    spdlog::warn("libbpf: {}", line);
  } else {
    spdlog::debug("libbpf: {}", line);
  }
  return n;
}

}  // namespace

void RouteLibbpfLogs() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(LibbpfPrint); });
}

Status LoadFailed(const std::string& what, int err) {
  Status st = ErrnoStatus(what, err);
  if (err == EPERM || err == EACCES) return PermissionDenied(st.message());
  return st;
}

Result<int> PossibleCpus() {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return ErrnoStatus("libbpf_num_possible_cpus", -ncpu);
  return ncpu;
}

}  // namespace shoal::ebpf_internal
