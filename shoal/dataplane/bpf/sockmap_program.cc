#include "shoal/dataplane/bpf/sockmap_program.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/magic.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <system_error>
#include <vector>

#include "shoal/common/descriptor.h"
#include "shoal/dataplane/bpf/bpf_loader.h"
#include "shoal_dataplane.skel.h"

namespace shoal {
namespace {

constexpr const char* kBpffsMount = "/sys/fs/bpf";

// The program reads descriptors where dataplane_abi.h says: every offset it uses is the
// descriptor's, and so are the kinds it counts.
static_assert(SHOAL_DESCRIPTOR_SIZE == sizeof(EventDescriptor));
static_assert(SHOAL_OFF_TARGET == offsetof(EventDescriptor, target) &&
              sizeof(EventDescriptor::target) == sizeof(__u32));
static_assert(SHOAL_OFF_KIND == offsetof(EventDescriptor, kind) &&
              sizeof(EventDescriptor::kind) == sizeof(__u16));
static_assert(SHOAL_OFF_FUNCTION_ID == offsetof(EventDescriptor, function_id) &&
              sizeof(EventDescriptor::function_id) == sizeof(__u32));
static_assert(SHOAL_OFF_LENGTH == offsetof(EventDescriptor, length) &&
              sizeof(EventDescriptor::length) == sizeof(__u64));
static_assert(SHOAL_KIND_REQUEST == static_cast<int>(EventKind::kRequest));
static_assert(SHOAL_KIND_RESPONSE == static_cast<int>(EventKind::kResponse));
static_assert(SHOAL_KIND_ERROR == static_cast<int>(EventKind::kError));
// The per-CPU value's layout as the kernel copies it out (bpf_map_lookup_elem on a per-CPU
// array fills one 8-byte-aligned value per CPU).
static_assert(sizeof(shoal_fn_counters) == 40 && sizeof(shoal_fn_counters) % 8 == 0);
static_assert(offsetof(shoal_fn_counters, events) == 0);
static_assert(offsetof(shoal_fn_counters, bytes) == 8);
static_assert(offsetof(shoal_fn_counters, requests) == 16);
static_assert(offsetof(shoal_fn_counters, responses) == 24);
static_assert(offsetof(shoal_fn_counters, drops) == 32);

Status EnsureBpffsMounted() {
  struct statfs st {};
  if (statfs(kBpffsMount, &st) == 0 && static_cast<unsigned long>(st.f_type) == BPF_FS_MAGIC) {
    return Status::Ok();
  }
  spdlog::info("bpffs is not mounted on {}: mounting it", kBpffsMount);
  std::error_code ec;
  std::filesystem::create_directories(kBpffsMount, ec);
  if (mount("bpf", kBpffsMount, "bpf", 0, "mode=0700") != 0) {
    return ErrnoStatus(std::string("mount bpffs on ") + kBpffsMount, errno);
  }
  return Status::Ok();
}

// Pins under `dir` left by a run that did not get to its destructor (crash, SIGKILL).
void RemoveStalePins(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) continue;
    if (unlink(entry.path().c_str()) == 0) {
      spdlog::warn("removed stale BPF pin {} (a previous run did not clean up)",
                   entry.path().string());
    }
  }
}

}  // namespace

Result<std::unique_ptr<SockmapProgram>> SockmapProgram::Load(const std::string& pin_dir) {
  ebpf_internal::RouteLibbpfLogs();

  if (pin_dir.empty()) return InvalidArgument("empty BPF pin directory");
  SHOAL_RETURN_IF_ERROR(EnsureBpffsMounted());

  std::unique_ptr<SockmapProgram> p(new SockmapProgram(pin_dir));
  p->skel_ = shoal_dataplane__open_and_load();
  if (p->skel_ == nullptr) {
    return ebpf_internal::LoadFailed("load BPF program shoal_dataplane", errno);
  }
  auto ncpu = ebpf_internal::PossibleCpus();
  if (!ncpu.ok()) return ncpu.status();
  p->num_cpus_ = *ncpu;

  if (bpf_prog_attach(p->prog_fd(), p->sock_hash_fd(), BPF_SK_MSG_VERDICT, 0) != 0) {
    return ErrnoStatus("attach sk_msg program to sock_hash", errno);
  }
  p->attached_ = true;

  std::filesystem::path dir(pin_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("create BPF pin directory " + pin_dir + ": " + ec.message());
  RemoveStalePins(dir);
  const std::pair<const char*, int> pins[] = {{kSockHashPin, p->sock_hash_fd()},
                                              {kCountersPin, p->counters_fd()},
                                              {kProgramPin, p->prog_fd()}};
  for (const auto& [name, fd] : pins) {
    std::string path = (dir / name).string();
    if (bpf_obj_pin(fd, path.c_str()) != 0) return ErrnoStatus("pin " + path, errno);
  }
  return p;
}

SockmapProgram::~SockmapProgram() {
  if (skel_ == nullptr) return;
  if (attached_ && bpf_prog_detach2(prog_fd(), sock_hash_fd(), BPF_SK_MSG_VERDICT) != 0) {
    spdlog::warn("detach sk_msg program: {}", strerror(errno));
  }
  Unpin();
  shoal_dataplane__destroy(skel_);
}

void SockmapProgram::Unpin() {
  std::filesystem::path dir(pin_dir_);
  for (const char* name : {kSockHashPin, kCountersPin, kProgramPin}) {
    std::string path = (dir / name).string();
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("unpin {}: {}", path, strerror(errno));
    }
  }
  if (rmdir(pin_dir_.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("remove BPF pin directory {}: {}", pin_dir_, strerror(errno));
  }
}

int SockmapProgram::sock_hash_fd() const { return bpf_map__fd(skel_->maps.sock_hash); }
int SockmapProgram::counters_fd() const { return bpf_map__fd(skel_->maps.fn_counters); }
int SockmapProgram::prog_fd() const { return bpf_program__fd(skel_->progs.shoal_redirect); }

Result<FunctionCounters> SockmapProgram::ReadCounters(uint32_t function_id) const {
  if (function_id >= kCounterSlots) {
    return InvalidArgument("function id " + std::to_string(function_id) +
                           " is beyond the BPF counter map");
  }
  FunctionCounters sum{};
  auto add = [](FunctionCounters& s, const FunctionCounters& c) {
    s.events += c.events;
    s.bytes += c.bytes;
    s.requests += c.requests;
    s.responses += c.responses;
    s.drops += c.drops;
  };
  if (!ebpf_internal::SumPerCpu(counters_fd(), &function_id, num_cpus_, sum, add)) {
    return ErrnoStatus("read fn_counters", errno);
  }
  return sum;
}

}  // namespace shoal
