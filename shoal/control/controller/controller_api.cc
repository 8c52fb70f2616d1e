#include "shoal/control/controller/controller_api.h"

#include <nlohmann/json.hpp>

namespace shoal::controller {
namespace {
using json = nlohmann::json;
constexpr const char* kNeedToken = "this API needs a bearer token (Authorization: Bearer <token>)";
}  // namespace

void JsonError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json{{"error", message}}.dump() + "\n", "application/json");
}

std::optional<auth::Principal> Authenticate(const httplib::Request& req, httplib::Response& res,
                                            const auth::TokenStore& tokens) {
  const std::string token(auth::BearerToken(req.get_header_value("Authorization")));
  if (token.empty()) {
    JsonError(res, 401, kNeedToken);
    return std::nullopt;
  }
  auto who = tokens.Authenticate(token);
  if (!who.ok()) {
    JsonError(res, 401, who.status().message());
    return std::nullopt;
  }
  return *who;
}

bool Authorize(const httplib::Request& req, httplib::Response& res, const auth::TokenStore& tokens,
               auth::Action action, const std::string& ns, const std::string& job) {
  auto who = Authenticate(req, res, tokens);
  if (!who) return false;
  if (Status st = auth::Authorize(*who, action, ns, job); !st.ok()) {
    JsonError(res, 403, st.message());
    return false;
  }
  return true;
}

void AddTokenRoutes(httplib::Server& server, const auth::TokenStore& tokens,
                    cluster::ClusterTokens& cluster_tokens) {
  server.Get("/v1/tokens", [&](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, tokens, auth::Action::kManageTokens)) return;
    json list = json::array();
    for (const auto& t : cluster_tokens.List()) list.push_back(json::parse(auth::TokenInfoJson(t)));
    res.set_content(json{{"tokens", list}}.dump() + "\n", "application/json");
  });
  server.Post("/v1/tokens", [&](const httplib::Request& req, httplib::Response& res) {
    if (!Authorize(req, res, tokens, auth::Action::kManageTokens)) return;
    auto request = auth::TokenRequestFromJson(req.body);
    if (!request.ok()) {
      JsonError(res, 400, request.status().message());
      return;
    }
    auto made = cluster_tokens.Create(*request);
    if (!made.ok()) {
      JsonError(res, HttpStatusFor(made.status().code()), made.status().message());
      return;
    }
    json out = json::parse(auth::TokenInfoJson(made->info));
    out["token"] = made->token;
    res.status = 201;
    res.set_content(out.dump() + "\n", "application/json");
  });
  server.Delete(
      R"(/v1/tokens/([0-9a-f]+))", [&](const httplib::Request& req, httplib::Response& res) {
        if (!Authorize(req, res, tokens, auth::Action::kManageTokens)) return;
        if (Status st = cluster_tokens.Revoke(req.matches[1].str()); !st.ok()) {
          JsonError(res, HttpStatusFor(st.code()), st.message());
          return;
        }
        res.set_content(json{{"revoked", req.matches[1].str()}}.dump() + "\n", "application/json");
      });
}

std::string ClusterJobJson(const ClusterJob& job) {
  const cluster::FlJobRecord& r = job.record;
  // The top's published status (the same fields as a node's GET /v1/jobs/<name>, with its
  // latest versions), then where the job runs.
  json j = json::object();
  if (job.state && job.state->top == r.top) {
    j = json::parse(job.state->status, nullptr, false);
    if (!j.is_object()) j = json::object();
    j["state_unix_ms"] = job.state->updated_unix_ms;
  } else {
    // Its top has not published since it was deployed (or moved): starting there.
    j["state"] = "pending";
  }
  j["name"] = r.name;
  j["namespace"] = r.tenant;
  j["top"] = r.top;
  j["generation"] = r.generation;
  j["created_unix_ms"] = r.created_unix_ms;
  j["updated_unix_ms"] = r.updated_unix_ms;
  if (!r.moved_from.empty()) j["moved_from"] = r.moved_from;
  return j.dump();
}

void AddFlJobRoutes(httplib::Server& server, const auth::TokenStore& tokens, ClusterFlJobs& jobs) {
  server.Get("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    auto who = Authenticate(req, res, tokens);
    if (!who) return;
    auto all = jobs.List();
    if (!all.ok()) {
      JsonError(res, 503, all.status().message());
      return;
    }
    json list = json::array();
    for (const auto& j : *all) {
      if (!auth::Authorize(*who, auth::Action::kRead, j.record.tenant).ok()) continue;
      list.push_back(json::parse(ClusterJobJson(j)));
    }
    res.set_content(json{{"jobs", list}}.dump() + "\n", "application/json");
  });
  // The job a request names, once the caller may take `action` on it (written when not). A
  // job's own clients may read its status, as on a node.
  auto authorized_job = [&](const httplib::Request& req, httplib::Response& res,
                            auth::Action action) -> std::optional<ClusterJob> {
    auto who = Authenticate(req, res, tokens);
    if (!who) return std::nullopt;
    auto job = jobs.Get(req.matches[1].str());
    if (!job.ok()) {
      JsonError(res, HttpStatusFor(job.status().code()), job.status().message());
      return std::nullopt;
    }
    const cluster::FlJobRecord& r = job->record;
    Status st = auth::Authorize(*who, action, r.tenant);
    if (!st.ok() && action == auth::Action::kRead &&
        auth::Authorize(*who, auth::Action::kFlClient, r.tenant, r.name).ok()) {
      st = Status::Ok();
    }
    if (!st.ok()) {
      JsonError(res, 403, st.message());
      return std::nullopt;
    }
    return std::move(*job);
  };
  server.Get(R"(/v1/jobs/([a-z0-9-]+))", [=](const httplib::Request& req, httplib::Response& res) {
    if (auto job = authorized_job(req, res, auth::Action::kRead)) {
      res.set_content(ClusterJobJson(*job) + "\n", "application/json");
    }
  });
  server.Delete(
      R"(/v1/jobs/([a-z0-9-]+))", [=, &jobs](const httplib::Request& req, httplib::Response& res) {
        auto job = authorized_job(req, res, auth::Action::kWrite);
        if (!job) return;
        if (Status st = jobs.Delete(job->record.name); !st.ok()) {
          JsonError(res, HttpStatusFor(st.code()), st.message());
          return;
        }
        res.set_content(json{{"deleted", job->record.name}}.dump() + "\n", "application/json");
      });
}

}  // namespace shoal::controller
