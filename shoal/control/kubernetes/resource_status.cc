#include "shoal/control/kubernetes/resource_status.h"

#include <ctime>
#include <vector>

namespace shoal::kubernetes {

using json = nlohmann::json;

std::string ManifestOf(const json& resource) {
  const json& meta = resource.value("metadata", json::object());
  json m = {{"apiVersion", "shoal.dev/v1"},
            {"kind", resource.value("kind", "")},
            {"metadata",
             {{"name", meta.value("name", "")}, {"namespace", meta.value("namespace", "default")}}},
            {"spec", resource.value("spec", json::object())}};
  if (resource.value("kind", "") == "Function" && meta.contains("labels")) {
    m["metadata"]["labels"] = meta["labels"];
  }
  return m.dump();
}

std::string Rfc3339Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

struct Condition {
  const char* type;
  bool status;
  std::string reason, message;
};

json Conditions(const std::vector<Condition>& conditions, int64_t generation, const json& previous,
                const std::string& now) {
  json out = json::array();
  for (const auto& c : conditions) {
    const std::string status = c.status ? "True" : "False";
    std::string since = now;
    if (previous.is_object() && previous.contains("conditions") &&
        previous["conditions"].is_array()) {
      for (const auto& p : previous["conditions"]) {
        if (p.value("type", "") == c.type && p.value("status", "") == status) {
          since = p.value("lastTransitionTime", now);
        }
      }
    }
    out.push_back({{"type", c.type},
                   {"status", status},
                   {"reason", c.reason},
                   {"message", c.message},
                   {"observedGeneration", generation},
                   {"lastTransitionTime", since}});
  }
  return out;
}

// The newest reported accuracy of a job status's versions, if any.
std::optional<double> LatestAccuracy(const json& job) {
  if (!job.contains("versions") || !job["versions"].is_array()) return std::nullopt;
  const json& v = job["versions"];
  for (auto it = v.rbegin(); it != v.rend(); ++it) {
    if (it->contains("accuracy") && (*it)["accuracy"].is_number()) {
      return (*it)["accuracy"].get<double>();
    }
  }
  return std::nullopt;
}

}  // namespace

json StatusFor(const std::string& kind, const Observed& o, const json& previous,
               const std::string& now) {
  json s = {{"observedGeneration", o.generation}};
  std::string state;
  std::vector<Condition> conditions;
  if (!o.deploy_error.empty()) {
    state = "Failed";
    s["message"] = o.deploy_error;
    conditions = {{"Ready", false, o.deploy_reason, o.deploy_error},
                  {"Progressing", false, o.deploy_reason, "not deployed"},
                  {"Failed", true, o.deploy_reason, o.deploy_error}};
  } else if (kind == "FLJob") {
    const std::string shoal_state = o.job ? o.job->value("state", "pending") : "pending";
    if (shoal_state == "done") {
      state = "Succeeded";
      conditions = {{"Ready", true, "Succeeded", "the job reached its stop condition"},
                    {"Progressing", false, "Succeeded", "the job is done"},
                    {"Failed", false, "Succeeded", ""}};
    } else if (shoal_state == "running") {
      state = "Running";
      conditions = {{"Ready", true, "Running", "the job's coordinator runs on its top node"},
                    {"Progressing", true, "Training", "clients train; versions are committed"},
                    {"Failed", false, "Running", ""}};
    } else {
      state = "Pending";
      conditions = {{"Ready", false, "Pending", "deployed; its top node has not started it"},
                    {"Progressing", true, "Deployed", "deployed into the Shoal cluster"},
                    {"Failed", false, "Deployed", ""}};
    }
    if (o.job) {
      if (o.job->contains("version") && (*o.job)["version"].is_number()) {
        s["version"] = (*o.job)["version"];
      }
      if (auto a = LatestAccuracy(*o.job)) s["accuracy"] = *a;
      if (o.job->contains("clients") && (*o.job)["clients"].is_object()) {
        s["clients"] = (*o.job)["clients"].value("joined", 0);
      }
      if (o.job->contains("top") && (*o.job)["top"].is_string()) s["top"] = (*o.job)["top"];
    }
  } else {
    const int64_t ready = o.ready.value_or(0), desired = o.desired.value_or(0);
    s["ready"] = ready;
    s["desired"] = desired;
    const bool ok = ready >= desired;
    state = ok ? "Ready" : "Scaling";
    const std::string counts = std::to_string(ready) + "/" + std::to_string(desired) + " ready";
    conditions = {{"Ready", ok, ok ? "InstancesReady" : "InstancesStarting", counts},
                  {"Progressing", !ok, ok ? "InstancesReady" : "InstancesStarting", counts},
                  {"Failed", false, "Deployed", ""}};
  }
  if (kind == "FLJob") s["state"] = state;
  s["conditions"] = Conditions(conditions, o.generation, previous, now);
  return s;
}

}  // namespace shoal::kubernetes
