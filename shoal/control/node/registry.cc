#include "shoal/control/node/registry.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shoal/common/clock.h"
#include "shoal/control/node/manifest.h"
#include "shoal/v1/function.pb.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kRecordSuffix = ".pb";
constexpr std::string_view kTempSuffix = ".tmp";

// The numbers and flags FunctionSpec and FunctionRecord share one to one, in one list that
// ToRecord and FromRecord both read: f(spec member, record getter, record setter).
template <class F>
void ForEachScalar(F&& f) {
  using S = FunctionSpec;
  using R = v1::FunctionRecord;
  f(&S::id, &R::id, &R::set_id);
  f(&S::concurrency, &R::concurrency, &R::set_concurrency);
  f(&S::min_scale, &R::min_scale, &R::set_min_scale);
  f(&S::max_scale, &R::max_scale, &R::set_max_scale);
  f(&S::timeout_s, &R::timeout_s, &R::set_timeout_s);
  f(&S::keep_alive_s, &R::keep_alive_s, &R::set_keep_alive_s);
  f(&S::max_body_bytes, &R::max_body_bytes, &R::set_max_body_bytes);
  f(&S::require_token, &R::require_token, &R::set_require_token);
  f(&S::cpu, &R::cpu, &R::set_cpu);
  f(&S::memory_bytes, &R::memory_bytes, &R::set_memory_bytes);
  f(&S::gpu, &R::gpu, &R::set_gpu);
  f(&S::generation, &R::generation, &R::set_generation);
  f(&S::created_unix_ms, &R::created_unix_ms, &R::set_created_unix_ms);
  f(&S::updated_unix_ms, &R::updated_unix_ms, &R::set_updated_unix_ms);
}

v1::FunctionRecord ToRecord(const FunctionSpec& s) {
  v1::FunctionRecord r;
  ForEachScalar([&](auto member, auto /*get*/, auto set) { (r.*set)(s.*member); });
  r.set_name(s.name);
  r.set_tenant(s.tenant);
  r.set_manifest(s.manifest);
  r.mutable_labels()->insert(s.labels.begin(), s.labels.end());
  auto* h = r.mutable_handler();
  h->set_builtin(s.handler.builtin);
  h->set_library(s.handler.library);
  h->set_symbol(s.handler.symbol);
  h->mutable_env()->insert(s.handler.env.begin(), s.handler.env.end());
  auto* a = r.mutable_autoscaling();
  a->set_policy(s.autoscaling.policy);
  a->set_target(s.autoscaling.target);
  a->set_keep_alive(s.autoscaling.keep_alive);
  a->mutable_params()->insert(s.autoscaling.params.begin(), s.autoscaling.params.end());
  a->set_policy_file(s.autoscaling.policy_file);
  a->set_metric(s.autoscaling.metric);
  for (const auto& n : s.security.seccomp_allow) r.add_seccomp_allow(n);
  r.set_on_anomaly(s.security.on_anomaly);
  for (const auto& p : s.security.allowed_paths) r.add_allowed_paths(p);
  return r;
}

FunctionSpec FromRecord(const v1::FunctionRecord& r) {
  FunctionSpec s;
  ForEachScalar([&](auto member, auto get, auto /*set*/) { s.*member = (r.*get)(); });
  s.name = r.name();
  s.tenant = r.tenant();
  s.manifest = r.manifest();
  s.labels.insert(r.labels().begin(), r.labels().end());
  s.handler.builtin = r.handler().builtin();
  s.handler.library = r.handler().library();
  s.handler.symbol = r.handler().symbol();
  s.handler.env.insert(r.handler().env().begin(), r.handler().env().end());
  if (r.has_autoscaling()) {
    s.autoscaling.policy = r.autoscaling().policy().empty() ? "none" : r.autoscaling().policy();
    s.autoscaling.target = r.autoscaling().target();
    s.autoscaling.keep_alive =
        r.autoscaling().keep_alive().empty() ? "fixed" : r.autoscaling().keep_alive();
    s.autoscaling.params.insert(r.autoscaling().params().begin(), r.autoscaling().params().end());
    s.autoscaling.policy_file = r.autoscaling().policy_file();
    if (!r.autoscaling().metric().empty()) s.autoscaling.metric = r.autoscaling().metric();
  }
  s.security.seccomp_allow.assign(r.seccomp_allow().begin(), r.seccomp_allow().end());
  s.security.on_anomaly = r.on_anomaly().empty() ? "alert" : r.on_anomaly();
  s.security.allowed_paths.assign(r.allowed_paths().begin(), r.allowed_paths().end());
  return s;
}

Status SyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync " + path, err);
  return Status::Ok();
}

// Writes `data` to `path` + ".tmp" and fsyncs it; Commit renames it into place.
Status WriteTemp(const std::string& path, const std::string& data) {
  const std::string tmp = path + std::string(kTempSuffix);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("open " + tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus("fsync " + tmp, err);
  }
  ::close(fd);
  return Status::Ok();
}

Status Commit(const std::string& path) {
  const std::string tmp = path + std::string(kTempSuffix);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp, errno);
  return Status::Ok();
}

}  // namespace

FunctionRegistry::FunctionRegistry(NodeConfig config, std::string dir)
    : config_(std::move(config)), dir_(std::move(dir)) {}

Result<std::unique_ptr<FunctionRegistry>> FunctionRegistry::Open(const NodeConfig& config) {
  const std::string dir = (fs::path(config.state_dir) / "functions").string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<FunctionRegistry> reg(new FunctionRegistry(config, dir));
  SHOAL_RETURN_IF_ERROR(reg->Load());
  return reg;
}

Status FunctionRegistry::Load() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string path = entry.path().string();
    const std::string file = entry.path().filename().string();
    if (file.ends_with(kTempSuffix)) {  // a deploy that died before its rename
      fs::remove(entry.path(), ec);
      continue;
    }
    if (!file.ends_with(kRecordSuffix)) continue;
    std::ifstream in(path, std::ios::binary);
    v1::FunctionRecord record;
    if (!in || !record.ParseFromIstream(&in)) {
      return Internal("cannot read the function record " + path + " (corrupt?)");
    }
    FunctionSpec spec = FromRecord(record);
    if (!IsDnsLabel(spec.name) || spec.id == 0 || spec.id > kMaxFunctionId) {
      return Internal("invalid function record " + path);
    }
    for (const auto& [name, other] : functions_) {
      if (other.id == spec.id) {
        return Internal("function records " + name + " and " + spec.name + " share id " +
                        std::to_string(spec.id));
      }
    }
    functions_[spec.name] = std::move(spec);
  }
  if (ec) return Internal("cannot list " + dir_ + ": " + ec.message());
  return Status::Ok();
}

uint32_t FunctionRegistry::LowestFreeId(const std::vector<bool>& taken) const {
  for (uint32_t id = 1; id <= kMaxFunctionId; ++id) {
    if (!taken[id]) return id;
  }
  return 0;
}

Result<std::vector<FunctionSpec>> FunctionRegistry::Deploy(std::string_view manifests) {
  auto parsed = ParseFunctionManifests(manifests, config_);
  if (!parsed.ok()) return parsed.status();
  return Deploy(std::move(*parsed));
}

Result<std::vector<FunctionSpec>> FunctionRegistry::Deploy(std::vector<FunctionSpec> specs) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> taken(kMaxFunctionId + 1, false);
  for (const auto& [name, spec] : functions_) taken[spec.id] = true;
  const int64_t now = UnixMs();
  for (FunctionSpec& spec : specs) {
    auto existing = functions_.find(spec.name);
    if (existing != functions_.end()) {
      spec.id = existing->second.id;
      spec.generation = existing->second.generation + 1;
      spec.created_unix_ms = existing->second.created_unix_ms;
    } else {
      spec.id = LowestFreeId(taken);
      if (spec.id == 0) {
        return ResourceExhausted("no free function id: " + std::to_string(kMaxFunctionId) +
                                 " functions are deployed");
      }
      taken[spec.id] = true;
      spec.generation = 1;
      spec.created_unix_ms = now;
    }
    spec.updated_unix_ms = now;
  }

  // Every record is written and synced before any replaces its predecessor, so a failed write
  // leaves the previous deployment whole.
  std::vector<std::string> paths;
  for (const FunctionSpec& spec : specs) {
    std::string path = dir_ + "/" + spec.name + std::string(kRecordSuffix);
    std::string data;
    if (!ToRecord(spec).SerializeToString(&data)) return Internal("cannot serialize " + spec.name);
    if (Status st = WriteTemp(path, data); !st.ok()) {
      for (const auto& p : paths) ::unlink((p + std::string(kTempSuffix)).c_str());
      return st;
    }
    paths.push_back(std::move(path));
  }
  for (const auto& path : paths) SHOAL_RETURN_IF_ERROR(Commit(path));
  SHOAL_RETURN_IF_ERROR(SyncPath(dir_, O_RDONLY | O_DIRECTORY));
  for (const FunctionSpec& spec : specs) functions_[spec.name] = spec;
  return specs;
}

Status FunctionRegistry::Delete(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(name);
  if (it == functions_.end()) return NotFound("function '" + name + "' not found");
  const std::string path = dir_ + "/" + name + std::string(kRecordSuffix);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink " + path, errno);
  SHOAL_RETURN_IF_ERROR(SyncPath(dir_, O_RDONLY | O_DIRECTORY));
  functions_.erase(it);
  return Status::Ok();
}

std::optional<FunctionSpec> FunctionRegistry::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(name);
  if (it == functions_.end()) return std::nullopt;
  return it->second;
}

std::vector<FunctionSpec> FunctionRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FunctionSpec> out;
  out.reserve(functions_.size());
  for (const auto& [name, spec] : functions_) out.push_back(spec);
  return out;
}

}  // namespace shoal
