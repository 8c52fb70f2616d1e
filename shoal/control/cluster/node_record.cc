#include "shoal/control/cluster/node_record.h"

#include <nlohmann/json.hpp>

#include "shoal/control/cluster/json_field.h"

namespace shoal::cluster {
using json = nlohmann::json;
constexpr const char* kWhat = "node record";

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
  auto parsed = JsonObject(text, kWhat);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  NodeRecord r;
  std::string protocol;
  SHOAL_RETURN_IF_ERROR(JsonField(j, kWhat, "name", &r.name));
  SHOAL_RETURN_IF_ERROR(JsonField(j, kWhat, "address", &r.address));
  SHOAL_RETURN_IF_ERROR(JsonField(j, kWhat, "protocol", &protocol));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "control", &r.control));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "version", &r.version));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "cores", &r.cores));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "memory_mib", &r.memory_mib));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "gpus", &r.gpus));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "cold_start_ms", &r.cold_start_ms));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "cached_functions", &r.cached_functions));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "fl_jobs", &r.fl_jobs));
  SHOAL_RETURN_IF_ERROR(OptionalJsonField(j, kWhat, "started_unix_ms", &r.started_unix_ms));
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
      SHOAL_RETURN_IF_ERROR(JsonField(p, kWhat, "tenant", &pool.tenant));
      SHOAL_RETURN_IF_ERROR(JsonField(p, kWhat, "backend", &pool.backend));
      SHOAL_RETURN_IF_ERROR(JsonField(p, kWhat, "bytes", &pool.bytes));
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
