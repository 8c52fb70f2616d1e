#include "shoal/control/cluster/cluster_function.h"

#include <nlohmann/json.hpp>

#include "shoal/control/cluster/json_field.h"

namespace shoal::cluster {
using json = nlohmann::json;

std::string ClusterFunction::ToJson() const {
  json j = ManifestRecordJson(*this);
  j["id"] = id;
  return j.dump();
}

Result<ClusterFunction> ClusterFunction::FromJson(const std::string& text) {
  auto f = ManifestRecordFromJson<ClusterFunction>(
      text, "function record", [](const json& j, const char* what, ClusterFunction& r) {
        return JsonField(j, what, "id", &r.id);
      });
  if (!f.ok()) return f;
  if (f->id < kClusterFunctionIdFirst || f->id > kClusterFunctionIdLast) {
    return InvalidArgument("function record: id " + std::to_string(f->id) + " is outside " +
                           std::to_string(kClusterFunctionIdFirst) + ".." +
                           std::to_string(kClusterFunctionIdLast));
  }
  return f;
}

std::string Placement::ToJson() const {
  return json{{"generation", generation}, {"min", min_scale}, {"max", max_scale}}.dump();
}

Result<Placement> Placement::FromJson(const std::string& text) {
  auto j = JsonObject(text, "placement");
  if (!j.ok()) return j.status();
  Placement p;
  SHOAL_RETURN_IF_ERROR(JsonField(*j, "placement", "generation", &p.generation));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, "placement", "min", &p.min_scale));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, "placement", "max", &p.max_scale));
  return p;
}

}  // namespace shoal::cluster
