#include "shoal/common/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "shoal/common/file_io.h"

namespace shoal {

const char* DataPlaneModeName(DataPlaneMode mode) {
  switch (mode) {
    case DataPlaneMode::kAuto: return "auto";
    case DataPlaneMode::kSockmap: return "sockmap";
    case DataPlaneMode::kUnix: return "unix";
  }
  return "auto";
}

const char* InstanceStartName(InstanceStart mode) {
  return mode == InstanceStart::kZygote ? "zygote" : "spawn";
}

const char* DetectSyscallsName(DetectSyscalls mode) {
  switch (mode) {
    case DetectSyscalls::kOn:
      return "true";
    case DetectSyscalls::kOff:
      return "false";
    case DetectSyscalls::kSampled:
      return "sampled";
  }
  return "sampled";
}

const char* CgroupModeName(CgroupMode mode) {
  switch (mode) {
    case CgroupMode::kAuto: return "auto";
    case CgroupMode::kV2: return "v2";
    case CgroupMode::kV1: return "v1";
    case CgroupMode::kOff: return "off";
  }
  return "auto";
}

namespace {

template <typename T>
Status Read(const YAML::Node& node, const char* key, T& out) {
  try {
    out = node.as<T>();
  } catch (const YAML::Exception&) {
    return InvalidArgument(std::string("config: ") + key + ": bad value (line " +
                           std::to_string(node.Mark().line + 1) + ")");
  }
  return {};
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
    const YAML::Node& v = kv.second;
    Status st;
    if (key == "node_name") st = Read(v, "node_name", c.node_name);
    else if (key == "listen_host") st = Read(v, "listen_host", c.listen_host);
    else if (key == "listen_port") st = Read(v, "listen_port", c.listen_port);
    else if (key == "gateway_threads") st = Read(v, "gateway_threads", c.gateway_threads);
    else if (key == "state_dir") st = Read(v, "state_dir", c.state_dir);
    else if (key == "pool_bytes") st = Read(v, "pool_bytes", c.pool_bytes);
    else if (key == "pool") st = Read(v, "pool", c.pool);
    else if (key == "pool_prefault") st = Read(v, "pool_prefault", c.pool_prefault);
    else if (key == "max_body_bytes") st = Read(v, "max_body_bytes", c.max_body_bytes);
    else if (key == "max_queue_per_function")
      st = Read(v, "max_queue_per_function", c.max_queue_per_function);
    else if (key == "bpf_pin_root") st = Read(v, "bpf_pin_root", c.bpf_pin_root);
    else if (key == "fn_binary") st = Read(v, "fn_binary", c.fn_binary);
    else if (key == "default_timeout_s") st = Read(v, "default_timeout_s", c.default_timeout_s);
    else if (key == "default_keep_alive_s")
      st = Read(v, "default_keep_alive_s", c.default_keep_alive_s);
    else if (key == "default_concurrency")
      st = Read(v, "default_concurrency", c.default_concurrency);
    else if (key == "default_max_scale") st = Read(v, "default_max_scale", c.default_max_scale);
    else if (key == "restart_backoff_s") st = Read(v, "restart_backoff_s", c.restart_backoff_s);
    else if (key == "control_interval_ms")
      st = Read(v, "control_interval_ms", c.control_interval_ms);
    else if (key == "autoscale_interval_ms")
      st = Read(v, "autoscale_interval_ms", c.autoscale_interval_ms);
    else if (key == "log_level") st = Read(v, "log_level", c.log_level);
    else if (key == "control_listen_host")
      st = Read(v, "control_listen_host", c.control_listen_host);
    else if (key == "control_port") st = Read(v, "control_port", c.control_port);
    else if (key == "control_tls_cert") st = Read(v, "control_tls_cert", c.control_tls_cert);
    else if (key == "control_tls_key") st = Read(v, "control_tls_key", c.control_tls_key);
    else if (key == "etcd") st = Read(v, "etcd", c.etcd);
    else if (key == "cluster") st = Read(v, "cluster", c.cluster);
    else if (key == "advertise_host") st = Read(v, "advertise_host", c.advertise_host);
    else if (key == "node_lease_ttl_s") st = Read(v, "node_lease_ttl_s", c.node_lease_ttl_s);
    else if (key == "forward_timeout_s") st = Read(v, "forward_timeout_s", c.forward_timeout_s);
    else if (key == "fl_hierarchy")
      st = Read(v, "fl_hierarchy", c.fl_hierarchy);
    else if (key == "fl_peer_port")
      st = Read(v, "fl_peer_port", c.fl_peer_port);
    else if (key == "control_allow_insecure")
      st = Read(v, "control_allow_insecure", c.control_allow_insecure);
    else if (key == "handler_dirs") {
      st = Read(v, "handler_dirs", c.handler_dirs);
      for (const auto& d : c.handler_dirs) {
        if (st.ok() && (d.empty() || (d[0] != '/' && d.rfind("$ORIGIN", 0) != 0))) {
          st = InvalidArgument("config: handler_dirs: '" + d +
                               "' must be an absolute path (or start with $ORIGIN)");
        }
      }
    } else if (key == "tenants") {
      if (!v.IsMap()) {
        st = InvalidArgument("config: tenants: must map namespaces to {uid: N, gid: N}");
      } else {
        c.tenants.clear();
        for (const auto& t : v) {
          const std::string ns = t.first.Scalar();
          TenantIdConfig id;
          const std::string field = "tenants." + ns;
          if (!t.second.IsMap() || !t.second["uid"] || !t.second["gid"]) {
            st = InvalidArgument("config: " + field + ": must be {uid: N, gid: N}");
          }
          if (st.ok()) st = Read(t.second["uid"], (field + ".uid").c_str(), id.uid);
          if (st.ok()) st = Read(t.second["gid"], (field + ".gid").c_str(), id.gid);
          if (st.ok() && (id.uid == 0 || id.gid == 0)) {
            st = InvalidArgument("config: " + field + ": uid and gid must not be 0 (root)");
          }
          if (!st.ok()) break;
          c.tenants[ns] = id;
        }
      }
    } else if (key == "tenant_uid_base") st = Read(v, "tenant_uid_base", c.tenant_uid_base);
    else if (key == "tenant_uid_count") st = Read(v, "tenant_uid_count", c.tenant_uid_count);
    else if (key == "cgroup_parent") st = Read(v, "cgroup_parent", c.cgroup_parent);
    else if (key == "instance_pids_max") st = Read(v, "instance_pids_max", c.instance_pids_max);
    else if (key == "fl_checkpoint_delay_ms")
      st = Read(v, "fl_checkpoint_delay_ms", c.fl_checkpoint_delay_ms);
    else if (key == "checkpoint_dir")
      st = Read(v, "checkpoint_dir", c.checkpoint_dir);
    else if (key == "zygote_timeout_ms") st = Read(v, "zygote_timeout_ms", c.zygote_timeout_ms);
    else if (key == "detect") st = Read(v, "detect", c.detect);
    else if (key == "detect_syscalls") {
      std::string m;
      st = Read(v, "detect_syscalls", m);
      if (st.ok()) {
        if (m == "true")
          c.detect_syscalls = DetectSyscalls::kOn;
        else if (m == "false")
          c.detect_syscalls = DetectSyscalls::kOff;
        else if (m == "sampled")
          c.detect_syscalls = DetectSyscalls::kSampled;
        else
          st = InvalidArgument("config: detect_syscalls: must be true, false or sampled, not '" +
                               m + "' (line " + std::to_string(v.Mark().line + 1) + ")");
      }
    } else if (key == "detect_sample_percent")
      st = Read(v, "detect_sample_percent", c.detect_sample_percent);
    else if (key == "detect_interval_ms") st = Read(v, "detect_interval_ms", c.detect_interval_ms);
    else if (key == "detect_learn_intervals")
      st = Read(v, "detect_learn_intervals", c.detect_learn_intervals);
    else if (key == "instance_start") {
      std::string m;
      st = Read(v, "instance_start", m);
      if (st.ok()) {
        if (m == "zygote") c.instance_start = InstanceStart::kZygote;
        else if (m == "spawn") c.instance_start = InstanceStart::kSpawn;
        else st = InvalidArgument("config: instance_start: must be zygote or spawn, not '" + m +
                                  "'");
      }
    }
    else if (key == "cgroups") {
      std::string m;
      st = Read(v, "cgroups", m);
      if (st.ok()) {
        if (m == "auto") c.cgroups = CgroupMode::kAuto;
        else if (m == "v2") c.cgroups = CgroupMode::kV2;
        else if (m == "v1") c.cgroups = CgroupMode::kV1;
        else if (m == "off") c.cgroups = CgroupMode::kOff;
        else st = InvalidArgument("config: cgroups: must be auto, v2, v1 or off, not '" + m + "'");
      }
    }
    else if (key == "dataplane") {
      std::string m;
      st = Read(v, "dataplane", m);
      if (st.ok()) {
        if (m == "auto") c.dataplane = DataPlaneMode::kAuto;
        else if (m == "sockmap") c.dataplane = DataPlaneMode::kSockmap;
        else if (m == "unix") c.dataplane = DataPlaneMode::kUnix;
        else st = InvalidArgument("config: dataplane: must be auto, sockmap or unix, not '" + m + "'");
      }
    } else {
      return InvalidArgument("config: unknown key '" + key + "' (line " +
                             std::to_string(kv.first.Mark().line + 1) + ")");
    }
    if (!st.ok()) return st;
  }
  if (c.control_tls_cert.empty() != c.control_tls_key.empty()) {
    return InvalidArgument("config: control_tls_cert and control_tls_key: set both or neither");
  }
  if (c.tenant_uid_base == 0) return InvalidArgument("config: tenant_uid_base: must not be 0 (root)");
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
  e << YAML::Key << "node_name" << YAML::Value << node_name;
  e << YAML::Key << "listen_host" << YAML::Value << listen_host;
  e << YAML::Key << "listen_port" << YAML::Value << listen_port;
  e << YAML::Key << "gateway_threads" << YAML::Value << gateway_threads;
  e << YAML::Key << "state_dir" << YAML::Value << state_dir;
  e << YAML::Key << "pool_bytes" << YAML::Value << pool_bytes;
  e << YAML::Key << "pool" << YAML::Value << pool;
  e << YAML::Key << "pool_prefault" << YAML::Value << pool_prefault;
  e << YAML::Key << "max_body_bytes" << YAML::Value << max_body_bytes;
  e << YAML::Key << "max_queue_per_function" << YAML::Value << max_queue_per_function;
  e << YAML::Key << "dataplane" << YAML::Value << DataPlaneModeName(dataplane);
  e << YAML::Key << "bpf_pin_root" << YAML::Value << bpf_pin_root;
  e << YAML::Key << "fn_binary" << YAML::Value << fn_binary;
  e << YAML::Key << "default_timeout_s" << YAML::Value << default_timeout_s;
  e << YAML::Key << "default_keep_alive_s" << YAML::Value << default_keep_alive_s;
  e << YAML::Key << "default_concurrency" << YAML::Value << default_concurrency;
  e << YAML::Key << "default_max_scale" << YAML::Value << default_max_scale;
  e << YAML::Key << "restart_backoff_s" << YAML::Value << restart_backoff_s;
  e << YAML::Key << "control_interval_ms" << YAML::Value << control_interval_ms;
  e << YAML::Key << "autoscale_interval_ms" << YAML::Value << autoscale_interval_ms;
  e << YAML::Key << "log_level" << YAML::Value << log_level;
  e << YAML::Key << "control_listen_host" << YAML::Value << control_listen_host;
  e << YAML::Key << "control_port" << YAML::Value << control_port;
  e << YAML::Key << "control_tls_cert" << YAML::Value << control_tls_cert;
  e << YAML::Key << "control_tls_key" << YAML::Value << control_tls_key;
  e << YAML::Key << "control_allow_insecure" << YAML::Value << control_allow_insecure;
  e << YAML::Key << "handler_dirs" << YAML::Value << YAML::Flow << handler_dirs;
  e << YAML::Key << "tenants" << YAML::Value;
  if (tenants.empty()) e << YAML::Flow;
  e << YAML::BeginMap;
  for (const auto& [ns, id] : tenants) {
    e << YAML::Key << ns << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "uid"
      << YAML::Value << id.uid << YAML::Key << "gid" << YAML::Value << id.gid << YAML::EndMap;
  }
  e << YAML::EndMap;
  e << YAML::Key << "tenant_uid_base" << YAML::Value << tenant_uid_base;
  e << YAML::Key << "tenant_uid_count" << YAML::Value << tenant_uid_count;
  e << YAML::Key << "cgroups" << YAML::Value << CgroupModeName(cgroups);
  e << YAML::Key << "cgroup_parent" << YAML::Value << cgroup_parent;
  e << YAML::Key << "instance_pids_max" << YAML::Value << instance_pids_max;
  e << YAML::Key << "fl_checkpoint_delay_ms" << YAML::Value << fl_checkpoint_delay_ms;
  e << YAML::Key << "checkpoint_dir" << YAML::Value << checkpoint_dir;
  e << YAML::Key << "instance_start" << YAML::Value << InstanceStartName(instance_start);
  e << YAML::Key << "zygote_timeout_ms" << YAML::Value << zygote_timeout_ms;
  e << YAML::Key << "detect" << YAML::Value << detect;
  e << YAML::Key << "detect_syscalls" << YAML::Value << DetectSyscallsName(detect_syscalls);
  e << YAML::Key << "detect_sample_percent" << YAML::Value << detect_sample_percent;
  e << YAML::Key << "detect_interval_ms" << YAML::Value << detect_interval_ms;
  e << YAML::Key << "detect_learn_intervals" << YAML::Value << detect_learn_intervals;
  e << YAML::Key << "etcd" << YAML::Value << etcd;
  e << YAML::Key << "cluster" << YAML::Value << cluster;
  e << YAML::Key << "advertise_host" << YAML::Value << advertise_host;
  e << YAML::Key << "node_lease_ttl_s" << YAML::Value << node_lease_ttl_s;
  e << YAML::Key << "forward_timeout_s" << YAML::Value << forward_timeout_s;
  e << YAML::Key << "fl_hierarchy" << YAML::Value << fl_hierarchy;
  e << YAML::Key << "fl_peer_port" << YAML::Value << fl_peer_port;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace shoal
