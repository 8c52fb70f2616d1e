#include "shoal/cluster/node_record.h"

#include <nlohmann/json.hpp>

namespace shoal::cluster {
namespace {
using json = nlohmann::json;

template <typename T>
Status Field(const json& j, const char* name, T* out, bool required) {
  auto it = j.find(name);
  if (it == j.end()) {
    return required ? InvalidArgument(std::string("node record: field '") + name + "' is missing")
                    : Status::Ok();
  }
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return InvalidArgument(std::string("node record: field '") + name + "' has the wrong type (" +
                           it->type_name() + ")");
  }
  return Status::Ok();
}
}  // namespace

std::string NodeRecord::ToJson() const {
  json pools_json = json::array();
  for (const auto& p : pools) {
    pools_json.push_back({{"tenant", p.tenant}, {"backend", p.backend}, {"bytes", p.bytes}});
  }
  return json{{"name", name},
              {"address", address},
              {"control", control},
              {"protocol", std::to_string(protocol_major) + "." + std::to_string(protocol_minor)},
              {"version", version},
              {"cores", cores},
              {"memory_mib", memory_mib},
              {"gpus", gpus},
              {"cold_start_ms", cold_start_ms},
              {"cached_functions", cached_functions},
              {"fl_jobs", fl_jobs},
              {"pools", pools_json},
              {"started_unix_ms", started_unix_ms}}
      .dump();
}

Result<NodeRecord> NodeRecord::FromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("node record: not a JSON object");
  NodeRecord r;
  std::string protocol;
  SHOAL_RETURN_IF_ERROR(Field(j, "name", &r.name, true));
  SHOAL_RETURN_IF_ERROR(Field(j, "address", &r.address, true));
  SHOAL_RETURN_IF_ERROR(Field(j, "protocol", &protocol, true));
  SHOAL_RETURN_IF_ERROR(Field(j, "control", &r.control, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "version", &r.version, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "cores", &r.cores, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "memory_mib", &r.memory_mib, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "gpus", &r.gpus, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "cold_start_ms", &r.cold_start_ms, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "cached_functions", &r.cached_functions, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "fl_jobs", &r.fl_jobs, false));
  SHOAL_RETURN_IF_ERROR(Field(j, "started_unix_ms", &r.started_unix_ms, false));
  if (int major = 0, minor = 0; std::sscanf(protocol.c_str(), "%d.%d", &major, &minor) == 2) {
    r.protocol_major = major;
    r.protocol_minor = minor;
  } else {
    return InvalidArgument("node record: field 'protocol' is not MAJOR.MINOR: '" + protocol + "'");
  }
  if (auto it = j.find("pools"); it != j.end()) {
    if (!it->is_array()) return InvalidArgument("node record: field 'pools' is not a list");
    for (const auto& p : *it) {
      NodePool pool;
      SHOAL_RETURN_IF_ERROR(Field(p, "tenant", &pool.tenant, true));
      SHOAL_RETURN_IF_ERROR(Field(p, "backend", &pool.backend, true));
      SHOAL_RETURN_IF_ERROR(Field(p, "bytes", &pool.bytes, true));
      r.pools.push_back(std::move(pool));
    }
  }
  return r;
}

ClusterKeys::ClusterKeys(std::string prefix) : prefix_(std::move(prefix)) {
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
}

Status ValidateNodeName(const std::string& name) {
  if (name.empty() || name.size() > 63) {
    return InvalidArgument("node name '" + name + "' must be 1 to 63 characters");
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return InvalidArgument("node name '" + name +
                             "' may hold only lower-case letters, digits and '-'");
    }
  }
  if (name.front() == '-' || name.back() == '-') {
    return InvalidArgument("node name '" + name + "' may not start or end with '-'");
  }
  return Status::Ok();
}

}  // namespace shoal::cluster
