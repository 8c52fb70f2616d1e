#include "shoal/cluster/cluster_function.h"

#include <nlohmann/json.hpp>

#include "json_field.h"

namespace shoal::cluster {
namespace {
using json = nlohmann::json;

}  // namespace

std::string ClusterFunction::ToJson() const {
  return json{{"name", name},
              {"namespace", tenant},
              {"id", id},
              {"generation", generation},
              {"manifest", manifest},
              {"created_unix_ms", created_unix_ms},
              {"updated_unix_ms", updated_unix_ms}}
      .dump();
}

Result<ClusterFunction> ClusterFunction::FromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("function record: not a JSON object");
  ClusterFunction f;
  const char* what = "function record";
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "name", &f.name));
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "namespace", &f.tenant));
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "id", &f.id));
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "generation", &f.generation));
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "manifest", &f.manifest));
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "created_unix_ms", &f.created_unix_ms));
  SHOAL_RETURN_IF_ERROR(JsonField(j, what, "updated_unix_ms", &f.updated_unix_ms));
  if (f.id < kClusterFunctionIdFirst || f.id > kClusterFunctionIdLast) {
    return InvalidArgument("function record: id " + std::to_string(f.id) + " is outside " +
                           std::to_string(kClusterFunctionIdFirst) + ".." +
                           std::to_string(kClusterFunctionIdLast));
  }
  return f;
}

std::string Placement::ToJson() const {
  return json{{"generation", generation}, {"min", min_scale}, {"max", max_scale}}.dump();
}

Result<Placement> Placement::FromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("placement: not a JSON object");
  Placement p;
  SHOAL_RETURN_IF_ERROR(JsonField(j, "placement", "generation", &p.generation));
  SHOAL_RETURN_IF_ERROR(JsonField(j, "placement", "min", &p.min_scale));
  SHOAL_RETURN_IF_ERROR(JsonField(j, "placement", "max", &p.max_scale));
  return p;
}

}  // namespace shoal::cluster
