#include "shoal/control/cluster/fl_job_record.h"

#include <nlohmann/json.hpp>

#include "shoal/control/cluster/json_field.h"

namespace shoal::cluster {
using json = nlohmann::json;

std::string FlJobRecord::ToJson() const {
  json j = ManifestRecordJson(*this);
  j["top"] = top;
  j["moved_from"] = moved_from;
  return j.dump();
}

Result<FlJobRecord> FlJobRecord::FromJson(const std::string& text) {
  return ManifestRecordFromJson<FlJobRecord>(
      text, "FL job record", [](const json& j, const char* what, FlJobRecord& r) -> Status {
        SHOAL_RETURN_IF_ERROR(JsonField(j, what, "top", &r.top));
        return OptionalJsonField(j, what, "moved_from", &r.moved_from);
      });
}

std::string FlJobState::ToJson() const {
  json j{{"top", top}, {"updated_unix_ms", updated_unix_ms}};
  j["status"] = json::parse(status, nullptr, false);
  return j.dump();
}

Result<FlJobState> FlJobState::FromJson(const std::string& text) {
  constexpr const char* what = "FL job state";
  auto j = JsonObject(text, what);
  if (!j.ok()) return j.status();
  FlJobState s;
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "top", &s.top));
  SHOAL_RETURN_IF_ERROR(JsonField(*j, what, "updated_unix_ms", &s.updated_unix_ms));
  auto it = j->find("status");
  if (it == j->end() || !it->is_object()) {
    return InvalidArgument(std::string(what) + ": field 'status' is missing or not an object");
  }
  s.status = it->dump();
  return s;
}

Result<std::string> FlJobState::CutStatus(const std::string& status_json) {
  auto j = JsonObject(status_json, "FL job status");
  if (!j.ok()) return j.status();
  constexpr size_t kVersions = 20;  // the latest, as `shoal fl status` shows them
  json out = json::object();
  for (const char* k :
       {"name", "algorithm", "state", "version", "round", "clients", "updates_total", "elapsed_s",
        "target_accuracy", "target_rounds", "best_accuracy", "leaf_function", "model"}) {
    if (auto it = j->find(k); it != j->end()) out[k] = *it;
  }
  if (auto it = j->find("versions"); it != j->end() && it->is_array()) {
    json v = json::array();
    const size_t from = it->size() > kVersions ? it->size() - kVersions : 0;
    for (size_t i = from; i < it->size(); ++i) v.push_back((*it)[i]);
    out["versions"] = std::move(v);
  }
  return out.dump();
}

}  // namespace shoal::cluster
