#include "shoal/control/node/control_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "shoal/control/node/control_api_shared.h"

namespace shoal {

// An instance in a function's description and a tenant's pool in the node's, as JSON objects
// under their members' names.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(InstanceInfo, id, pid, state, inflight, served, age_s,
                                   cold_start_ms, start_path, start_note, restarts, quarantine)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TenantPoolInfo, tenant, backend, capacity_bytes, used_bytes,
                                   free_bytes, live_buffers, alloc_failures)
namespace control_api_internal {

HttpReply Json(int status, const json& j) {
  HttpReply r;
  r.status = status;
  r.content_type = "application/json";
  // Names, paths and manifests come from clients and need not be UTF-8: replace, never throw.
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

HttpReply Error(int status, const std::string& message) {
  return Json(status, json{{"error", message}});
}

HttpReply MethodNotAllowed(std::string_view method, std::string_view path, const char* allow) {
  HttpReply r = Error(405, "method " + std::string(method) + " not allowed on " +
                               std::string(path) + " (allowed: " + allow + ")");
  r.headers.emplace_back("Allow", allow);
  return r;
}

// A listing shows a deployer its own namespace only; viewers and admins see every namespace.
bool Lists(const auth::Principal& who, const std::string& ns) {
  return who.role != auth::Role::kDeployer || who.ns == ns;
}

json JobDeployJson(const FlJobSpec& s, bool created) {
  return json{{"kind", "FLJob"},
              {"name", s.name},
              {"namespace", s.tenant},
              {"algorithm", s.algorithm},
              {"action", created ? "created" : "configured"}};
}

// The body of a join or eval request: a JSON object (an empty body reads as {}).
std::optional<json> JsonObject(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

HttpReply StatusError(const Status& st) { return Error(HttpStatusFor(st.code()), st.message()); }

}  // namespace control_api_internal

using namespace control_api_internal;  // NOLINT(google-build-using-namespace): this file's own

namespace {

constexpr uint64_t kDefaultLogBytes = 1 << 20;
constexpr uint64_t kMaxLogBytes = 16 << 20;

json FunctionJson(const FunctionSpec& s) {
  json handler = json::object();
  if (!s.handler.builtin.empty()) {
    handler["builtin"] = s.handler.builtin;
  } else {
    handler["library"] = s.handler.library;
    handler["symbol"] = s.handler.symbol;
  }
  handler["env"] = s.handler.env;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return json{
      {"id", s.id},
      {"name", s.name},
      {"namespace", s.tenant},
      {"labels", s.labels},
      {"handler", handler},
      {"concurrency", s.concurrency},
      {"scale", {{"min", s.min_scale}, {"max", s.max_scale}}},
      {"timeout_s", s.timeout_s},
      {"keep_alive_s", s.keep_alive_s},
      {"autoscaling",
       {{"policy", s.autoscaling.policy},
        {"target", s.autoscaling.target},
        {"metric", s.autoscaling.metric},
        {"keep_alive", s.autoscaling.keep_alive},
        {"params", s.autoscaling.params},
        {"policy_file", s.autoscaling.policy_file}}},
      {"max_body_bytes", s.max_body_bytes},
      {"auth", s.require_token ? "token" : "none"},
      {"resources", {{"cpu", s.cpu}, {"memory_bytes", s.memory_bytes}, {"gpu", s.gpu}}},
      {"generation", s.generation},
      {"created_unix_ms", s.created_unix_ms},
      {"updated_unix_ms", s.updated_unix_ms},
      {"age_s", s.created_unix_ms > 0 ? static_cast<double>(now - s.created_unix_ms) / 1000 : 0.0},
      {"manifest", s.manifest},
  };
}

// The figures of a function that its status and its row of GET /v1/top both give.
json FiguresJson(const FunctionStats& st) {
  return {
      {"policy", st.policy},
      {"desired", st.desired},
      {"actual", st.actual},
      {"prewarm_starts", st.prewarm_starts},
      {"cold_starts_avoided", st.cold_starts_avoided},
      {"ready", st.ready},
      {"starting", st.starting},
      {"inflight", st.inflight},
      {"queued", st.queued},
      {"rps", st.rps},
      {"p50_ms", st.p50_ms},
      {"p99_ms", st.p99_ms},
      {"requests_total", st.requests_total},
      {"errors_total", st.errors_total},
      {"cold_starts", st.cold_starts},
      {"last_cold_start_ms", st.last_cold_start_ms},
      {"bpf_events", st.bpf_events},
  };
}

json StatsJson(const FunctionStats& st, bool with_instances) {
  json j = FiguresJson(st);
  j["unschedulable"] = st.unschedulable;
  j["decision"] = {{"replicas", st.decision_replicas},
                   {"prewarm", st.decision_prewarm},
                   {"keep_alive_s", st.decision_keep_alive_s},
                   {"concurrency_target", st.decision_target},
                   {"panic", st.decision_panic},
                   {"age_s", st.decision_age_s},
                   {"reason", st.decision_reason}};
  j["cold_requests"] = st.cold_requests;
  j["instance_seconds"] = st.instance_seconds;
  j["bpf_bytes"] = st.bpf_bytes;
  j["instances_total"] = st.instances.size();
  // The compromise detector (shoal/security/detect/): its state, action and latest anomalies.
  if (!st.detector.empty()) {
    json anomalies = json::array();
    for (const AnomalyInfo& a : st.anomalies) {
      anomalies.push_back({{"age_s", a.age_s},
                           {"instance", a.instance},
                           {"kind", a.kind},
                           {"evidence", a.evidence},
                           {"action", a.action}});
    }
    j["detector"] = {{"state", st.detector},
                     {"on_anomaly", st.on_anomaly.empty() ? "alert" : st.on_anomaly},
                     {"anomalies_total", st.anomalies_total},
                     {"anomalies", anomalies}};
  }
  if (with_instances) {
    j["instances"] = st.instances;
  }
  return j;
}

json TokenJson(const auth::TokenInfo& t) { return json::parse(auth::TokenInfoJson(t)); }

}  // namespace

ControlApi::ControlApi(FunctionRegistry& registry, RuntimeView& runtime, JobService* jobs,
                       auth::TokenStore* tokens)
    : registry_(registry), runtime_(runtime), jobs_(jobs), tokens_(tokens) {}

std::optional<FunctionSpec> ControlApi::FindFunction(const std::string& name) const {
  if (auto spec = registry_.Get(name)) return spec;
  if (cluster_functions_) {
    for (auto& s : cluster_functions_()) {
      if (s.name == name) return std::move(s);
    }
  }
  return std::nullopt;
}

std::vector<FunctionSpec> ControlApi::AllFunctions(std::vector<bool>* cluster) const {
  std::vector<FunctionSpec> all = registry_.List();
  if (cluster != nullptr) cluster->assign(all.size(), false);
  if (cluster_functions_) {
    for (auto& s : cluster_functions_()) {
      if (registry_.Get(s.name)) continue;  // the node's own of that name is what runs here
      all.push_back(std::move(s));
      if (cluster != nullptr) cluster->push_back(true);
    }
  }
  return all;
}

HttpReply ControlApi::Handle(std::string_view method, std::string_view path, std::string_view query,
                             std::string_view body, const auth::Principal& who) {
  using auth::Action;
  try {
    std::string_view rest = path;
    while (rest.size() > 1 && rest.back() == '/') rest.remove_suffix(1);
    if (!rest.starts_with("/v1/")) return Error(404, "no route " + std::string(path));
    rest.remove_prefix(4);

    if (rest == "functions") {
      if (method == "GET") return ListFunctions(who);
      if (method == "POST") return Deploy(body, who);
      return MethodNotAllowed(method, path, "GET, POST");
    }
    if (rest.starts_with("functions/")) {
      rest.remove_prefix(10);
      const size_t slash = rest.find('/');
      const std::string name(rest.substr(0, slash));
      const std::string_view sub =
          slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
      if (name.empty()) return Error(404, "no route " + std::string(path));
      const bool logs = sub == "logs";
      if (!sub.empty() && !logs) return Error(404, "no route " + std::string(path));
      const Action action = logs                 ? Action::kLogs
                            : method == "DELETE" ? Action::kWrite
                                                 : Action::kRead;
      // The role is checked against the function's namespace before anything else is said
      // about it; an unknown function is then 404 for whoever may act in some namespace.
      const auto spec = FindFunction(name);
      if (spec && method == "DELETE" && !registry_.Get(name)) {
        return Error(409, "function '" + name +
                              "' is the cluster's (deployed through shoal-controller): delete it "
                              "there");
      }
      // An FL job's leaf function (fl.<job>) is the job's, not the registry's: readable (its
      // instances: the aggregation tree's leaves) by whoever may read the job.
      std::optional<std::string> leaf_ns;
      if (!spec && name.starts_with("fl.") && jobs_ != nullptr) {
        if (auto ns = JobNamespace(name.substr(3)); ns.ok()) leaf_ns = *ns;
      }
      const std::string scope = spec ? spec->tenant : leaf_ns.value_or(who.ns);
      if (Status st = auth::Authorize(who, action, scope); !st.ok()) return StatusError(st);
      if (leaf_ns && !logs && method == "GET") return GetLeafFunction(name, *leaf_ns);
      if (!logs) {
        if (method == "GET") return GetFunction(name);
        if (method == "DELETE") return DeleteFunction(name);
        return MethodNotAllowed(method, path, "GET, DELETE");
      }
      if (method == "GET") return Logs(name, query);
      return MethodNotAllowed(method, path, "GET");
    }
    if (rest == "jobs" || rest.starts_with("jobs/")) {
      rest.remove_prefix(4);
      return Jobs(method, path, rest, query, body, who);
    }
    if (rest == "tokens" || rest.starts_with("tokens/")) {
      if (Status st = auth::Authorize(who, Action::kManageTokens, {}); !st.ok()) {
        return StatusError(st);
      }
      rest.remove_prefix(6);
      return Tokens(method, path, rest, body);
    }
    if (rest == "ui-info") {
      // Which server this is, so the web console picks a node's pages or the cluster's
      // (shoal-controller answers "shoal-controller"). Any valid token may ask.
      if (method != "GET") return MethodNotAllowed(method, path, "GET");
      return Json(200, json{{"server", "shoald"},
                            {"version", kShoalVersion},
                            {"node", registry_.config().node_name}});
    }
    if (rest == "top" || rest == "node") {
      if (Status st = auth::Authorize(who, Action::kReadNode, {}); !st.ok()) return StatusError(st);
      if (method != "GET") return MethodNotAllowed(method, path, "GET");
      return rest == "top" ? Top() : Node();
    }
    return Error(404, "no route " + std::string(path));
  } catch (const std::exception& e) {
    return Error(500, std::string("internal error: ") + e.what());
  }
}

HttpReply ControlApi::Deploy(std::string_view body, const auth::Principal& who) {
  // Every document is validated before anything is deployed; FL jobs go first because the
  // coordinator still checks their algorithm parameters and may refuse them.
  auto parsed = ParseManifests(body, registry_.config());
  if (!parsed.ok()) return StatusError(parsed.status());
  Manifests& m = *parsed;
  // All or nothing: one document outside the token's namespace refuses the whole manifest.
  for (const FunctionSpec& s : m.functions) {
    if (Status st = auth::Authorize(who, auth::Action::kWrite, s.tenant); !st.ok()) {
      return StatusError(st);
    }
    if (auto old = registry_.Get(s.name); old && old->tenant != s.tenant) {
      if (Status st = auth::Authorize(who, auth::Action::kWrite, old->tenant); !st.ok()) {
        return StatusError(st);
      }
    }
  }
  for (const FlJobSpec& s : m.jobs) {
    if (Status st = auth::Authorize(who, auth::Action::kWrite, s.tenant); !st.ok()) {
      return StatusError(st);
    }
    if (jobs_ != nullptr) {
      if (auto old = JobNamespace(s.name); old.ok() && *old != s.tenant) {
        if (Status st = auth::Authorize(who, auth::Action::kWrite, *old); !st.ok()) {
          return StatusError(st);
        }
      }
    }
  }
  if (!m.jobs.empty() && jobs_ == nullptr) return Error(501, kJobsDisabled);
  // One function per OIP model name: /v2/models/{model} must have one meaning.
  {
    std::map<std::string, std::string> served;  // model -> function
    for (const FunctionSpec& s : registry_.List()) {
      if (auto model = InferenceModelName(s); !model.empty()) served[model] = s.name;
    }
    for (const FunctionSpec& s : m.functions) {  // a redeploy may rename its model
      std::erase_if(served, [&](const auto& kv) { return kv.second == s.name; });
    }
    for (const FunctionSpec& s : m.functions) {
      const std::string model = InferenceModelName(s);
      if (model.empty()) continue;
      if (auto it = served.find(model); it != served.end()) {
        return Error(409, "spec.inference.modelName: model '" + model +
                              "' is already served by function '" + it->second + "'");
      }
      served[model] = s.name;
    }
  }
  std::vector<bool> jobs_created;
  if (!m.jobs.empty()) {
    auto created = DeployJobSpecs(m.jobs);
    if (!created.ok()) return StatusError(created.status());
    jobs_created = std::move(*created);
  }
  std::vector<FunctionSpec> functions;
  if (!m.functions.empty()) {
    auto deployed = registry_.Deploy(std::move(m.functions));
    if (!deployed.ok()) {
      DeleteCreatedJobs(m.jobs, jobs_created);
      return StatusError(deployed.status());
    }
    functions = std::move(*deployed);
    runtime_.FunctionsChanged();
  }
  bool created = false;  // 201 when anything is new, 200 when all were updates
  json list = json::array();
  for (const FunctionSpec& s : functions) {
    json j = FunctionJson(s);
    j["action"] = s.generation == 1 ? "created" : "configured";
    created = created || s.generation == 1;
    list.push_back(std::move(j));
  }
  json reply{{"functions", std::move(list)}};
  if (!m.jobs.empty()) {
    json jobs = json::array();
    for (size_t i = 0; i < m.jobs.size(); ++i) {
      jobs.push_back(JobDeployJson(m.jobs[i], jobs_created[i]));
      created = created || jobs_created[i];
    }
    reply["jobs"] = std::move(jobs);
  }
  return Json(created ? 201 : 200, reply);
}

HttpReply ControlApi::ListFunctions(const auth::Principal& who) {
  if (who.role != auth::Role::kDeployer) {
    if (Status st = auth::Authorize(who, auth::Action::kRead, {}); !st.ok()) return StatusError(st);
  }
  json list = json::array();
  std::vector<bool> cluster;
  const std::vector<FunctionSpec> all = AllFunctions(&cluster);
  for (size_t i = 0; i < all.size(); ++i) {
    const FunctionSpec& s = all[i];
    if (!Lists(who, s.tenant)) continue;
    json j = FunctionJson(s);
    if (cluster[i]) j["cluster"] = true;
    j["status"] = StatsJson(runtime_.Stats(s.name), false);
    list.push_back(std::move(j));
  }
  return Json(200, json{{"functions", std::move(list)}});
}

HttpReply ControlApi::GetFunction(const std::string& name) {
  auto spec = FindFunction(name);
  if (!spec) return Error(404, "function '" + name + "' not found");
  json j = FunctionJson(*spec);
  if (!registry_.Get(name)) j["cluster"] = true;
  j["status"] = StatsJson(runtime_.Stats(name), true);
  return Json(200, j);
}

HttpReply ControlApi::GetLeafFunction(const std::string& name, const std::string& ns) {
  return Json(200, json{{"name", name},
                        {"namespace", ns},
                        {"internal", true},
                        {"job", name.substr(3)},
                        {"status", StatsJson(runtime_.Stats(name), true)}});
}

HttpReply ControlApi::DeleteFunction(const std::string& name) {
  Status st = registry_.Delete(name);
  if (!st.ok()) return Error(HttpStatusFor(st.code()), st.message());
  runtime_.FunctionsChanged();
  return Json(200, json{{"deleted", name}});
}

HttpReply ControlApi::Logs(const std::string& name, std::string_view query) {
  if (!FindFunction(name)) return Error(404, "function '" + name + "' not found");
  uint64_t offset = 0;
  uint64_t max = kDefaultLogBytes;
  if (!QueryUint(query, "offset", &offset)) return Error(400, "offset: must be an integer");
  if (!QueryUint(query, "max", &max)) return Error(400, "max: must be an integer");
  max = std::min(std::max<uint64_t>(max, 1), kMaxLogBytes);
  LogChunk chunk = runtime_.Logs(name, offset, max);
  HttpReply r;
  r.status = 200;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(chunk.text);
  r.headers.emplace_back("X-Shoal-Next-Offset", std::to_string(chunk.next_offset));
  return r;
}

HttpReply ControlApi::Tokens(std::string_view method, std::string_view path, std::string_view rest,
                             std::string_view body) {
  if (tokens_ == nullptr) return Error(501, "tokens are not managed by this node");
  if (rest.empty() || rest == "/") {
    if (method == "GET") {
      json list = json::array();
      for (const auth::TokenInfo& t : tokens_->List()) list.push_back(TokenJson(t));
      return Json(200, json{{"tokens", std::move(list)}});
    }
    if (method != "POST") return MethodNotAllowed(method, path, "GET, POST");
    auto req = auth::TokenRequestFromJson(body);
    if (!req.ok()) return StatusError(req.status());
    auto created = tokens_->Create(*req);
    if (!created.ok()) return StatusError(created.status());
    json out = TokenJson(created->info);
    out["token"] = created->token;
    return Json(201, out);
  }
  rest.remove_prefix(1);
  if (rest.find('/') != std::string_view::npos) return Error(404, "no route " + std::string(path));
  if (method != "DELETE") return MethodNotAllowed(method, path, "DELETE");
  if (Status st = tokens_->Revoke(rest); !st.ok()) return StatusError(st);
  return Json(200, json{{"revoked", std::string(rest)}});
}

HttpReply ControlApi::Top() {
  json list = json::array();
  std::vector<bool> cluster;
  const std::vector<FunctionSpec> all = AllFunctions(&cluster);
  for (size_t i = 0; i < all.size(); ++i) {
    const FunctionSpec& s = all[i];
    const FunctionStats st = runtime_.Stats(s.name);
    json row = FiguresJson(st);
    row["name"] = s.name;
    if (cluster[i]) row["cluster"] = true;  // as in the list: only the cluster's are marked
    row["anomalies_total"] = st.anomalies_total;
    row["quarantined"] =
        std::count_if(st.instances.begin(), st.instances.end(),
                      [](const InstanceInfo& i) { return i.state == "quarantined"; });
    list.push_back(std::move(row));
  }
  return Json(200, json{{"dataplane", runtime_.DataPlaneMode()}, {"functions", std::move(list)}});
}

HttpReply ControlApi::Snapshot(const auth::Principal& who) {
  if (Status st = auth::Authorize(who, auth::Action::kReadNode, {}); !st.ok()) {
    return StatusError(st);
  }
  json node = json::parse(Node().body);
  json functions = json::array();
  for (const FunctionSpec& s : AllFunctions()) {
    if (!Lists(who, s.tenant)) continue;
    json j = FunctionJson(s);
    j.erase("manifest");  // every second to every stream: the figures, not the documents
    j["status"] = StatsJson(runtime_.Stats(s.name), false);
    functions.push_back(std::move(j));
  }
  json jobs = json::array();
  for (const std::string& name :
       jobs_ == nullptr ? std::vector<std::string>{} : jobs_->ListJobs()) {
    if (who.role == auth::Role::kDeployer) {
      auto ns = jobs_->JobNamespace(name);
      if (!ns.ok() || !Lists(who, *ns)) continue;
    }
    auto status = jobs_->JobStatusJson(name);
    if (!status.ok()) continue;  // deleted meanwhile
    const json j = json::parse(*status, nullptr, false);
    if (!j.is_object()) continue;
    json summary = json::object();
    for (const char* key : {"name", "namespace", "algorithm", "state", "version", "round",
                            "best_accuracy", "target_accuracy", "clients", "updates_total"}) {
      if (j.contains(key)) summary[key] = j[key];
    }
    // The newest version that clients have evaluated (accuracy and loss arrive after commit).
    summary["latest"] = nullptr;
    if (j.contains("versions") && j["versions"].is_array()) {
      const json& versions = j["versions"];
      for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        if (it->is_object() && it->contains("accuracy") && !(*it)["accuracy"].is_null()) {
          summary["latest"] = {{"version", it->value("version", json())},
                               {"accuracy", (*it)["accuracy"]},
                               {"loss", it->value("loss", json())}};
          break;
        }
      }
    }
    jobs.push_back(std::move(summary));
  }
  json out{
      {"node", std::move(node)}, {"functions", std::move(functions)}, {"jobs", std::move(jobs)}};
  if (jobs_ == nullptr) out["jobs_note"] = kJobsDisabled;
  return Json(200, out);
}

HttpReply ControlApi::Node() {
  return Json(200, json{{"dataplane", runtime_.DataPlaneMode()},
                        {"version", kShoalVersion},
                        {"node", registry_.config().node_name},
                        {"functions", registry_.List().size()},
                        {"pools", runtime_.Pools()}});
}

}  // namespace shoal
