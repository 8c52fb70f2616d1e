// Whether this process can load BPF programs at all, decided before anything is loaded, so that
// a BPF test skips only when the capability is really absent (not root / no CAP_BPF, no kernel
// BTF, no bpffs) and a load failure with the capability present fails the test: a verifier
// regression must not read as "Skipped". Header-only; used by the unit and integration tests.
#pragma once

#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace shoal::bpf_test {

// The reason BPF is unavailable here, or "" when it is available (then loading must work).
inline std::string BpfCapabilityAbsent() {
  if (geteuid() != 0) {
    return "not root (euid " + std::to_string(geteuid()) + "): the sk_msg program needs root";
  }
  // Root in a container may still lack CAP_BPF (39) and CAP_SYS_ADMIN (21).
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const unsigned long long eff = std::stoull(line.substr(7), nullptr, 16);
    if ((eff & (1ULL << 39)) == 0 && (eff & (1ULL << 21)) == 0) {
      return "root without CAP_BPF or CAP_SYS_ADMIN (CapEff " + line.substr(7) + ")";
    }
  }
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    return "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing): CO-RE programs cannot load";
  }
  struct statfs fs {};
  if (statfs("/sys/fs/bpf", &fs) != 0 || static_cast<unsigned long>(fs.f_type) != BPF_FS_MAGIC) {
    return "no bpffs mounted at /sys/fs/bpf (mount -t bpf bpf /sys/fs/bpf)";
  }
  return {};
}

}  // namespace shoal::bpf_test
