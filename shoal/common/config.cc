#include "shoal/common/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "shoal/common/enum_names.h"
#include "shoal/common/file_io.h"

namespace shoal {

namespace {

constexpr EnumName<DataPlaneMode> kDataPlaneModes[] = {{DataPlaneMode::kAuto, "auto"},
                                                       {DataPlaneMode::kSockmap, "sockmap"},
                                                       {DataPlaneMode::kUnix, "unix"}};
constexpr EnumName<CgroupMode> kCgroupModes[] = {{CgroupMode::kAuto, "auto"},
                                                 {CgroupMode::kV2, "v2"},
                                                 {CgroupMode::kV1, "v1"},
                                                 {CgroupMode::kOff, "off"}};
constexpr EnumName<InstanceStart> kInstanceStarts[] = {{InstanceStart::kZygote, "zygote"},
                                                       {InstanceStart::kSpawn, "spawn"}};
constexpr EnumName<DetectSyscalls> kDetectSyscalls[] = {{DetectSyscalls::kOn, "true"},
                                                        {DetectSyscalls::kOff, "false"},
                                                        {DetectSyscalls::kSampled, "sampled"}};

}  // namespace

const char* DataPlaneModeName(DataPlaneMode mode) { return NameOf(kDataPlaneModes, mode, "auto"); }
const char* CgroupModeName(CgroupMode mode) { return NameOf(kCgroupModes, mode, "auto"); }
const char* InstanceStartName(InstanceStart mode) { return NameOf(kInstanceStarts, mode, "spawn"); }
const char* DetectSyscallsName(DetectSyscalls mode) {
  return NameOf(kDetectSyscalls, mode, "sampled");
}

namespace {

std::string LineOf(const YAML::Node& node) {
  return "(line " + std::to_string(node.Mark().line + 1) + ")";
}

template <typename T>
Status Read(const YAML::Node& node, const char* key, T& out) {
  try {
    out = node.as<T>();
  } catch (const YAML::Exception&) {
    return InvalidArgument(std::string("config: ") + key + ": bad value " + LineOf(node));
  }
  return {};
}

// One config key: how it is read from the file into NodeConfig and printed back. The table
// below lists every key once, in the order --print-config prints them.
struct ConfigKey {
  const char* key;
  Status (*read)(const YAML::Node& value, const char* key, NodeConfig& c);
  void (*write)(YAML::Emitter& e, const NodeConfig& c);
};

// A key read as its field's type and printed as it is.
template <auto Field>
constexpr ConfigKey Plain(const char* key) {
  return {key,
          [](const YAML::Node& v, const char* k, NodeConfig& c) { return Read(v, k, c.*Field); },
          [](YAML::Emitter& e, const NodeConfig& c) { e << c.*Field; }};
}

// A key that names one of an enum's values. detect_syscalls' message has always said the line;
// the older keys' have not (tests pin both).
template <auto Field, const auto& kNames, bool kSayLine = false>
constexpr ConfigKey Named(const char* key) {
  return {key,
          [](const YAML::Node& v, const char* k, NodeConfig& c) {
            std::string m;
            SHOAL_RETURN_IF_ERROR(Read(v, k, m));
            const auto value = ValueOf(kNames, m);
            if (!value) {
              std::string message = std::string("config: ") + k + ": must be " + NameList(kNames) +
                                    ", not '" + m + "'";
              if (kSayLine) message.append(" ").append(LineOf(v));
              return InvalidArgument(message);
            }
            c.*Field = *value;
            return Status::Ok();
          },
          [](YAML::Emitter& e, const NodeConfig& c) { e << NameOf(kNames, c.*Field, "?"); }};
}

Status ReadHandlerDirs(const YAML::Node& v, const char* key, NodeConfig& c) {
  SHOAL_RETURN_IF_ERROR(Read(v, key, c.handler_dirs));
  for (const auto& d : c.handler_dirs) {
    if (d.empty() || (d[0] != '/' && d.rfind("$ORIGIN", 0) != 0)) {
      return InvalidArgument("config: handler_dirs: '" + d +
                             "' must be an absolute path (or start with $ORIGIN)");
    }
  }
  return Status::Ok();
}

void WriteHandlerDirs(YAML::Emitter& e, const NodeConfig& c) { e << YAML::Flow << c.handler_dirs; }

Status ReadTenants(const YAML::Node& v, const char*, NodeConfig& c) {
  if (!v.IsMap()) {
    return InvalidArgument("config: tenants: must map namespaces to {uid: N, gid: N}");
  }
  c.tenants.clear();
  for (const auto& t : v) {
    const std::string ns = t.first.Scalar();
    TenantIdConfig id;
    const std::string field = "tenants." + ns;
    if (!t.second.IsMap() || !t.second["uid"] || !t.second["gid"]) {
      return InvalidArgument("config: " + field + ": must be {uid: N, gid: N}");
    }
    SHOAL_RETURN_IF_ERROR(Read(t.second["uid"], (field + ".uid").c_str(), id.uid));
    SHOAL_RETURN_IF_ERROR(Read(t.second["gid"], (field + ".gid").c_str(), id.gid));
    if (id.uid == 0 || id.gid == 0) {
      return InvalidArgument("config: " + field + ": uid and gid must not be 0 (root)");
    }
    c.tenants[ns] = id;
  }
  return Status::Ok();
}

void WriteTenants(YAML::Emitter& e, const NodeConfig& c) {
  if (c.tenants.empty()) e << YAML::Flow;
  e << YAML::BeginMap;
  for (const auto& [ns, id] : c.tenants) {
    e << YAML::Key << ns << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "uid"
      << YAML::Value << id.uid << YAML::Key << "gid" << YAML::Value << id.gid << YAML::EndMap;
  }
  e << YAML::EndMap;
}

using C = NodeConfig;
const ConfigKey kConfigKeys[] = {
    Plain<&C::node_name>("node_name"),
    Plain<&C::listen_host>("listen_host"),
    Plain<&C::listen_port>("listen_port"),
    Plain<&C::gateway_threads>("gateway_threads"),
    Plain<&C::state_dir>("state_dir"),
    Plain<&C::pool_bytes>("pool_bytes"),
    Plain<&C::pool>("pool"),
    Plain<&C::pool_prefault>("pool_prefault"),
    Plain<&C::pool_warm_bytes>("pool_warm_bytes"),
    Plain<&C::max_body_bytes>("max_body_bytes"),
    Plain<&C::max_queue_per_function>("max_queue_per_function"),
    Named<&C::dataplane, kDataPlaneModes>("dataplane"),
    Plain<&C::bpf_pin_root>("bpf_pin_root"),
    Plain<&C::fn_binary>("fn_binary"),
    Plain<&C::default_timeout_s>("default_timeout_s"),
    Plain<&C::default_keep_alive_s>("default_keep_alive_s"),
    Plain<&C::default_concurrency>("default_concurrency"),
    Plain<&C::default_max_scale>("default_max_scale"),
    Plain<&C::restart_backoff_s>("restart_backoff_s"),
    Plain<&C::control_interval_ms>("control_interval_ms"),
    Plain<&C::autoscale_interval_ms>("autoscale_interval_ms"),
    Plain<&C::log_level>("log_level"),
    Plain<&C::control_listen_host>("control_listen_host"),
    Plain<&C::control_port>("control_port"),
    Plain<&C::control_tls_cert>("control_tls_cert"),
    Plain<&C::control_tls_key>("control_tls_key"),
    Plain<&C::control_allow_insecure>("control_allow_insecure"),
    {"handler_dirs", ReadHandlerDirs, WriteHandlerDirs},
    {"tenants", ReadTenants, WriteTenants},
    Plain<&C::tenant_uid_base>("tenant_uid_base"),
    Plain<&C::tenant_uid_count>("tenant_uid_count"),
    Named<&C::cgroups, kCgroupModes>("cgroups"),
    Plain<&C::cgroup_parent>("cgroup_parent"),
    Plain<&C::instance_pids_max>("instance_pids_max"),
    Plain<&C::fl_checkpoint_delay_ms>("fl_checkpoint_delay_ms"),
    Plain<&C::checkpoint_dir>("checkpoint_dir"),
    Named<&C::instance_start, kInstanceStarts>("instance_start"),
    Plain<&C::zygote_timeout_ms>("zygote_timeout_ms"),
    Plain<&C::detect>("detect"),
    Named<&C::detect_syscalls, kDetectSyscalls, true>("detect_syscalls"),
    Plain<&C::detect_sample_percent>("detect_sample_percent"),
    Plain<&C::detect_interval_ms>("detect_interval_ms"),
    Plain<&C::detect_learn_intervals>("detect_learn_intervals"),
    Plain<&C::etcd>("etcd"),
    Plain<&C::cluster>("cluster"),
    Plain<&C::advertise_host>("advertise_host"),
    Plain<&C::node_lease_ttl_s>("node_lease_ttl_s"),
    Plain<&C::forward_timeout_s>("forward_timeout_s"),
    Plain<&C::fl_hierarchy>("fl_hierarchy"),
    Plain<&C::fl_peer_port>("fl_peer_port"),
};

const ConfigKey* FindKey(std::string_view key) {
  for (const ConfigKey& k : kConfigKeys) {
    if (key == k.key) return &k;
  }
  return nullptr;
}

}  // namespace

Result<NodeConfig> NodeConfig::LoadString(const std::string& yaml) {
  NodeConfig c;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("config: ") + e.what());
  }
  if (root.IsNull()) return c;
  if (!root.IsMap()) return InvalidArgument("config: the top level must be a mapping");
  for (const auto& kv : root) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
    const ConfigKey* k = FindKey(key);
    if (k == nullptr) {
      return InvalidArgument("config: unknown key '" + key + "' " + LineOf(kv.first));
    }
    SHOAL_RETURN_IF_ERROR(k->read(kv.second, k->key, c));
  }
  if (c.control_tls_cert.empty() != c.control_tls_key.empty()) {
    return InvalidArgument("config: control_tls_cert and control_tls_key: set both or neither");
  }
  if (c.tenant_uid_base == 0)
    return InvalidArgument("config: tenant_uid_base: must not be 0 (root)");
  if (c.detect_interval_ms < 100 || c.detect_interval_ms > 600000) {
    return InvalidArgument("config: detect_interval_ms: must be 100 to 600000 ms");
  }
  if (c.detect_sample_percent < 1 || c.detect_sample_percent > 100) {
    return InvalidArgument("config: detect_sample_percent: must be 1 to 100");
  }
  if (c.detect_learn_intervals < 1) {
    return InvalidArgument("config: detect_learn_intervals: must be at least 1");
  }
  if (c.pool_bytes < (16ull << 20)) return InvalidArgument("config: pool_bytes: must be >= 16 MiB");
  if (c.pool != "boost" && c.pool != "dpdk" && c.pool != "auto")
    return InvalidArgument("config: pool: '" + c.pool + "': want boost, dpdk or auto");
  if (c.node_lease_ttl_s < 2 || c.node_lease_ttl_s > 300)
    return InvalidArgument("config: node_lease_ttl_s: must be 2 to 300 seconds");
  if (!(c.forward_timeout_s >= 0.1 && c.forward_timeout_s <= 3600))
    return InvalidArgument("config: forward_timeout_s: must be 0.1 to 3600 seconds");
  if (c.cluster.empty() || c.cluster.find('/') != std::string::npos)
    return InvalidArgument("config: cluster: '" + c.cluster + "': want a name without '/'");
  if (c.max_body_bytes >= c.pool_bytes)
    return InvalidArgument("config: max_body_bytes: must be smaller than pool_bytes");
  return c;
}

Result<NodeConfig> NodeConfig::LoadFile(const std::string& path) {
  const std::optional<std::string> text = ReadFileBytes(path);
  if (!text) return NotFound("config: cannot open " + path);
  return LoadString(*text);
}

std::string NodeConfig::ToYaml() const {
  YAML::Emitter e;
  e << YAML::BeginMap;
  for (const ConfigKey& k : kConfigKeys) {
    e << YAML::Key << k.key << YAML::Value;
    k.write(e, *this);
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace shoal
