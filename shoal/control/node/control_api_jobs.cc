// ControlApi: the FL job endpoints (/v1/jobs...: deploy, list, status, delete, join, task,
// model download, evaluation reports), served through the node's JobService.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "shoal/control/node/control_api.h"
#include "shoal/control/node/control_api_shared.h"

namespace shoal {

using namespace control_api_internal;  // NOLINT(google-build-using-namespace): the API's own

Result<std::vector<bool>> ControlApi::DeployJobSpecs(const std::vector<FlJobSpec>& specs) {
  const std::vector<std::string> existing = jobs_->ListJobs();
  std::vector<bool> created;
  for (const FlJobSpec& spec : specs) {
    Status st = jobs_->DeployJob(spec);
    if (!st.ok()) {
      DeleteCreatedJobs(specs, created);
      return st;
    }
    created.push_back(std::find(existing.begin(), existing.end(), spec.name) == existing.end());
  }
  return created;
}

void ControlApi::DeleteCreatedJobs(const std::vector<FlJobSpec>& specs,
                                   const std::vector<bool>& created) {
  for (size_t i = 0; i < created.size() && i < specs.size(); ++i) {
    if (!created[i]) continue;
    // The manifest is refused whole; a job it created that cannot be taken back stays, said.
    if (Status st = jobs_->DeleteJob(specs[i].name); !st.ok()) {
      spdlog::warn("control: a refused manifest's job {} stays deployed: {}", specs[i].name,
                   st.ToString());
    }
  }
}

HttpReply ControlApi::DeployJobsOnly(std::string_view body, const auth::Principal& who) {
  auto parsed = ParseFlJobManifests(body);
  if (!parsed.ok()) return StatusError(parsed.status());
  for (const FlJobSpec& s : *parsed) {
    if (Status st = auth::Authorize(who, auth::Action::kWrite, s.tenant); !st.ok()) {
      return StatusError(st);
    }
    if (auto old = JobNamespace(s.name); old.ok() && *old != s.tenant) {
      if (Status st = auth::Authorize(who, auth::Action::kWrite, *old); !st.ok()) {
        return StatusError(st);
      }
    }
  }
  auto created = DeployJobSpecs(*parsed);
  if (!created.ok()) return StatusError(created.status());
  bool any_created = false;
  json jobs = json::array();
  for (size_t i = 0; i < parsed->size(); ++i) {
    jobs.push_back(JobDeployJson((*parsed)[i], (*created)[i]));
    any_created = any_created || (*created)[i];
  }
  return Json(any_created ? 201 : 200, json{{"jobs", std::move(jobs)}});
}

HttpReply ControlApi::Jobs(std::string_view method, std::string_view path, std::string_view rest,
                           std::string_view query, std::string_view body,
                           const auth::Principal& who) {
  using auth::Action;
  if (jobs_ == nullptr) return Error(501, kJobsDisabled);
  if (rest.empty()) {
    if (method == "GET") {
      if (who.role != auth::Role::kDeployer) {
        if (Status st = auth::Authorize(who, Action::kRead, {}); !st.ok()) return StatusError(st);
      }
      return ListJobs(who);
    }
    if (method == "POST") return DeployJobsOnly(body, who);
    return MethodNotAllowed(method, path, "GET, POST");
  }
  rest.remove_prefix(1);  // the '/'
  const size_t slash = rest.find('/');
  const std::string job(rest.substr(0, slash));
  const std::string_view sub =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (job.empty()) return Error(404, "no route " + std::string(path));
  {
    // Who may do what to a job: its status and model are readable by viewers and by the job's
    // FL clients; deleting it is a write; join, task, eval (and updates, at the gateway) are
    // the FL client's.
    const bool client_route = sub == "join" || sub == "task" || sub == "eval" || sub == "secagg" ||
                              sub.starts_with("secagg/");
    const bool readable = sub.empty() || sub == "model";
    const bool changes_supernodes = sub.starts_with("flower/supernodes") && method != "GET";
    const Action action = client_route ? Action::kFlClient
                          : (sub.empty() && method == "DELETE") || changes_supernodes
                              ? Action::kWrite
                              : Action::kRead;
    auto ns = JobNamespace(job);
    // An unknown job: authorize against the caller's own scope, then say 404.
    const std::string scope = ns.ok() ? *ns : who.ns;
    Status st = auth::Authorize(who, action, scope, action == Action::kFlClient ? job : "");
    if (!st.ok() && readable && action == Action::kRead) {
      st = auth::Authorize(who, Action::kFlClient, scope, job);
      if (!st.ok()) st = auth::Authorize(who, Action::kRead, scope);
    }
    if (!st.ok()) return StatusError(st);
  }
  // A job's routes: /v1/jobs/<job>[/<sub>], the method each answers and its handler. A known
  // sub with another method answers 405 naming the methods it has, in this order.
  using Handler = HttpReply (*)(ControlApi& api, const std::string& job, std::string_view query,
                                std::string_view body);
  struct JobRoute {
    std::string_view sub;
    std::string_view method;
    Handler handle;
  };
  static constexpr JobRoute kJobRoutes[] = {
      {"", "GET",
       [](ControlApi& api, const std::string& job, std::string_view query, std::string_view) {
         return api.JobStatus(job, query);
       }},
      {"", "DELETE",
       [](ControlApi& api, const std::string& job, std::string_view, std::string_view) {
         return api.DeleteJob(job);
       }},
      {"join", "POST",
       [](ControlApi& api, const std::string& job, std::string_view, std::string_view body) {
         return api.Join(job, body);
       }},
      {"task", "GET",
       [](ControlApi& api, const std::string& job, std::string_view query, std::string_view) {
         return api.Task(job, query);
       }},
      {"model", "GET",
       [](ControlApi& api, const std::string& job, std::string_view query, std::string_view) {
         return api.Model(job, query);
       }},
      {"eval", "POST",
       [](ControlApi& api, const std::string& job, std::string_view, std::string_view body) {
         return api.Evaluate(job, body);
       }},
      // spec.privacy.secureAggregation's protocol (shoal/fl/secagg).
      {"secagg", "GET",
       [](ControlApi& api, const std::string& job, std::string_view query, std::string_view) {
         return api.SecureAggregation(job, "", query, {});
       }},
      {"secagg/advertise", "POST",
       [](ControlApi& api, const std::string& job, std::string_view, std::string_view body) {
         return api.SecureAggregation(job, "advertise", {}, body);
       }},
      {"secagg/shares", "POST",
       [](ControlApi& api, const std::string& job, std::string_view, std::string_view body) {
         return api.SecureAggregation(job, "shares", {}, body);
       }},
      {"secagg/unmask", "POST",
       [](ControlApi& api, const std::string& job, std::string_view, std::string_view body) {
         return api.SecureAggregation(job, "unmask", {}, body);
       }},
  };
  if (sub == "flower/supernodes" || sub.starts_with("flower/supernodes/")) {
    if (!flower_supernodes_) return Error(501, "this API serves no Flower job's SuperNodes");
    const std::string_view id = sub.substr(std::min(sub.size(), sizeof("flower/supernodes")));
    if (sub.size() > sizeof("flower/supernodes") - 1 && id.empty()) {
      return Error(404, "no route " + std::string(path));
    }
    return flower_supernodes_(method, job, id, body);
  }
  std::string allow;
  for (const JobRoute& route : kJobRoutes) {
    if (route.sub != sub) continue;
    if (route.method == method) return route.handle(*this, job, query, body);
    allow.append(allow.empty() ? "" : ", ").append(route.method);
  }
  if (!allow.empty()) return MethodNotAllowed(method, path, allow.c_str());
  if (sub == "updates") {
    return Error(404,
                 "updates go to the gateway's public listener (they land in the job's "
                 "shared-memory pool), not to the control API");
  }
  return Error(404, "no route " + std::string(path));
}

Result<std::string> ControlApi::JobNamespace(const std::string& job) {
  if (jobs_ == nullptr) return NotFound("FL job '" + job + "' not found");
  return jobs_->JobNamespace(job);
}

HttpReply ControlApi::ListJobs(const auth::Principal& who) {
  json list = json::array();
  for (const std::string& name : jobs_->ListJobs()) {
    if (who.role == auth::Role::kDeployer) {
      auto ns = jobs_->JobNamespace(name);
      if (!ns.ok() || !Lists(who, *ns)) continue;
    }
    auto status = jobs_->JobStatusJson(name);
    if (!status.ok()) {
      if (status.status().code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return StatusError(status.status());
    }
    json j = json::parse(*status, nullptr, false);
    if (j.is_discarded()) {
      return Error(500, "internal error: the status of job '" + name + "' is not JSON");
    }
    list.push_back(std::move(j));
  }
  return Json(200, json{{"jobs", std::move(list)}});
}

HttpReply ControlApi::JobStatus(const std::string& job, std::string_view query) {
  // The clients listed: ?clients_from=N (client number) &clients_limit=L (up to kMaxLimit).
  StatusClientsPage page;
  uint64_t limit = page.limit;
  if (!QueryUint(query, "clients_from", &page.from)) {
    return Error(400, "clients_from: must be an integer >= 0 (a client number: c<N>)");
  }
  if (!QueryUint(query, "clients_limit", &limit) || limit > StatusClientsPage::kMaxLimit) {
    return Error(400, "clients_limit: must be an integer from 0 to " +
                          std::to_string(StatusClientsPage::kMaxLimit));
  }
  page.limit = static_cast<uint32_t>(limit);
  auto status = jobs_->JobStatusJson(job, page);
  if (!status.ok()) return StatusError(status.status());
  HttpReply r;
  r.body = std::move(*status);
  if (r.body.empty() || r.body.back() != '\n') r.body += '\n';
  return r;
}

HttpReply ControlApi::DeleteJob(const std::string& job) {
  Status st = jobs_->DeleteJob(job);
  if (!st.ok()) return StatusError(st);
  return Json(200, json{{"deleted", job}});
}

HttpReply ControlApi::Join(const std::string& job, std::string_view body) {
  auto j = JsonObject(body);
  if (!j) {
    return Error(400, "body: must be a JSON object like {\"name\": \"...\", \"token\": \"...\"}");
  }
  for (const char* key : {"name", "token"}) {
    if (j->contains(key) && !(*j)[key].is_string()) {
      return Error(400, std::string(key) + ": must be a string");
    }
  }
  auto joined = jobs_->Join(job, j->value("name", ""), j->value("token", ""));
  if (!joined.ok()) return StatusError(joined.status());
  return Json(200, json{{"client_id", joined->client_id}, {"token", joined->token}});
}

HttpReply ControlApi::Task(const std::string& job, std::string_view query) {
  const std::optional<std::string> client = QueryValue(query, "client");
  if (!client || client->empty()) return Error(400, "client: required (?client=ID&token=T)");
  auto task = jobs_->Task(job, *client, QueryValue(query, "token").value_or(""));
  if (!task.ok()) return StatusError(task.status());
  switch (task->kind) {
    case TaskResult::Kind::kTrain:
      return Json(200, json{{"kind", "train"},
                            {"model_version", task->model_version},
                            {"local_steps", task->local_steps},
                            {"learning_rate", task->learning_rate},
                            {"batch_size", task->batch_size}});
    case TaskResult::Kind::kWait:
      return Json(200, json{{"kind", "wait"}, {"retry_after_ms", task->retry_after_ms}});
    case TaskResult::Kind::kDone:
      break;
  }
  return Json(200, json{{"kind", "done"}});
}

HttpReply ControlApi::Model(const std::string& job, std::string_view query) {
  std::optional<uint64_t> version;
  if (QueryValue(query, "version")) {
    uint64_t v = 0;
    if (!QueryUint(query, "version", &v)) return Error(400, "version: must be an integer");
    version = v;
  }
  const std::string format = QueryValue(query, "format").value_or("safetensors");
  if (format != "safetensors" && format != "onnx") {
    return Error(400, "format: must be safetensors or onnx, not '" + format + "'");
  }
  if (format == "onnx" && !onnx_export_) {
    // The caller asked the wrong listener (a client error, as a 4xx, not the server's 5xx).
    return Error(400,
                 "format: onnx is served on the control listener "
                 "(control_listen_host:control_port), not here; this listener serves "
                 "safetensors");
  }
  auto model = jobs_->Model(job, version);
  if (!model.ok()) return StatusError(model.status());
  HttpReply r;
  r.content_type = "application/octet-stream";
  r.headers.emplace_back("X-Shoal-Model-Version", std::to_string(model->version));
  if (format == "safetensors") {
    r.shared_body = std::move(model->bytes);
    return r;
  }
  // The architecture and its widths come from the job's status, as `shoal fl model` reads them.
  auto status = jobs_->JobStatusJson(job);
  if (!status.ok()) return StatusError(status.status());
  auto onnx = onnx_export_(*status, *model->bytes);
  if (!onnx.ok()) return Error(500, "job " + job + ": " + onnx.status().message());
  r.body = std::move(*onnx);
  return r;
}

HttpReply ControlApi::SecureAggregation(const std::string& job, std::string_view step,
                                        std::string_view query, std::string_view body) {
  SecAggRequest req;
  req.step = std::string(step);
  req.body = std::string(body);
  if (step.empty()) {
    const std::optional<std::string> client = QueryValue(query, "client");
    if (!client || client->empty()) {
      return Error(400, "client: required (?client=ID&token=T&round=N)");
    }
    req.client_id = *client;
    req.token = QueryValue(query, "token").value_or("");
    if (!QueryUint(query, "round", &req.round)) {
      return Error(400, "round: must be an integer >= 0 (0: the latest)");
    }
  }
  auto reply = jobs_->SecureAggregation(job, req);
  if (!reply.ok()) return StatusError(reply.status());
  HttpReply r;
  r.body = std::move(*reply);
  return r;
}

HttpReply ControlApi::Evaluate(const std::string& job, std::string_view body) {
  auto j = JsonObject(body);
  if (!j || j->empty()) {
    return Error(400,
                 "body: must be a JSON object {\"client_id\", \"token\", \"version\", "
                 "\"accuracy\", \"loss\", \"samples\"}");
  }
  EvalReport report;
  auto string_field = [&](const char* key, bool required, std::string* out) -> std::string {
    if (!j->contains(key)) return required ? std::string(key) + ": required" : "";
    if (!(*j)[key].is_string()) return std::string(key) + ": must be a string";
    *out = (*j)[key].get<std::string>();
    return "";
  };
  auto uint_field = [&](const char* key, bool required, uint64_t* out) -> std::string {
    if (!j->contains(key)) return required ? std::string(key) + ": required" : "";
    if (!(*j)[key].is_number_unsigned()) return std::string(key) + ": must be an integer >= 0";
    *out = (*j)[key].get<uint64_t>();
    return "";
  };
  auto number_field = [&](const char* key, double* out) -> std::string {
    if (!j->contains(key)) return std::string(key) + ": required";
    if (!(*j)[key].is_number()) return std::string(key) + ": must be a number";
    *out = (*j)[key].get<double>();
    if (!std::isfinite(*out)) return std::string(key) + ": must be finite";
    return "";
  };
  for (const std::string& err :
       {string_field("client_id", true, &report.client_id),
        string_field("token", false, &report.token), uint_field("version", true, &report.version),
        number_field("accuracy", &report.accuracy), number_field("loss", &report.loss),
        uint_field("samples", false, &report.samples)}) {
    if (!err.empty()) return Error(400, err);
  }
  Status st = jobs_->Evaluate(job, report);
  if (!st.ok()) return StatusError(st);
  return Json(200, json{{"ok", true}});
}

}  // namespace shoal
