// Reading a field of a record etcd holds (a JSON object), with errors that name the record and
// the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "shoal/common/status.h"
#include "shoal/control/cluster/manifest_record.h"

namespace shoal::cluster {

template <typename T>
Status JsonField(const nlohmann::json& j, const char* what, const char* name, T* out) {
  auto it = j.find(name);
  if (it == j.end())
    return InvalidArgument(std::string(what) + ": field '" + name + "' is missing");
  try {
    *out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return InvalidArgument(std::string(what) + ": field '" + name + "' has the wrong type (" +
                           it->type_name() + ")");
  }
  return Status::Ok();
}

// JsonField for a field a record may leave out (`out` keeps its value then).
template <typename T>
Status OptionalJsonField(const nlohmann::json& j, const char* what, const char* name, T* out) {
  return j.contains(name) ? JsonField(j, what, name, out) : Status::Ok();
}

// `text` as a JSON object, or kInvalidArgument "<what>: not a JSON object".
inline Result<nlohmann::json> JsonObject(const std::string& text, const char* what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(std::string(what) + ": not a JSON object");
  }
  return j;
}

// A ManifestRecord's fields (name, namespace, generation, manifest and the two times) as a JSON
// object, to which a record adds its own.
inline nlohmann::json ManifestRecordJson(const ManifestRecord& r) {
  return {{"name", r.name},
          {"namespace", r.tenant},
          {"generation", r.generation},
          {"manifest", r.manifest},
          {"created_unix_ms", r.created_unix_ms},
          {"updated_unix_ms", r.updated_unix_ms}};
}

// A record of `text` (kInvalidArgument naming `what` and the field when it is not one): those
// fields, read in the order a record names its first bad field by: name, namespace, then the
// record's own (`own(j, what, r)` returning Status), then the rest.
template <typename Record, typename Own>
Result<Record> ManifestRecordFromJson(const std::string& text, const char* what, Own own) {
  auto j = JsonObject(text, what);
  if (!j.ok()) return j.status();
  Record r;
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "name", &r.name));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "namespace", &r.tenant));
  SHOAL_RETURN_IF_ERROR(own(*j, what, r));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "generation", &r.generation));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "manifest", &r.manifest));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "created_unix_ms", &r.created_unix_ms));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "updated_unix_ms", &r.updated_unix_ms));
  return r;
}

}  // namespace shoal::cluster
