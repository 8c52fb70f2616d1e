// Routes of shoal-controller's /v1 API beyond nodes and functions: the cluster's tokens and its
// FL jobs (deployed through POST /v1/functions with FLJob documents, like on a node).
#pragma once

#include <httplib.h>

#include <optional>
#include <string>

#include "shoal/control/cluster/cluster_tokens.h"
#include "shoal/control/controller/cluster_fl_jobs.h"
#include "shoal/security/auth/role.h"
#include "shoal/security/auth/token_store.h"

namespace shoal::controller {

void JsonError(httplib::Response& res, int status, const std::string& message);

// The request's principal, or nullopt with a 401 written (no token, or one the cluster does
// not know).
std::optional<auth::Principal> Authenticate(const httplib::Request& req, httplib::Response& res,
                                            const auth::TokenStore& tokens);
// Authenticate, then whether it may take `action` on `ns` (403 written when not).
bool Authorize(const httplib::Request& req, httplib::Response& res, const auth::TokenStore& tokens,
               auth::Action action, const std::string& ns = "", const std::string& job = "");

// GET/POST /v1/tokens, DELETE /v1/tokens/{id}.
void AddTokenRoutes(httplib::Server& server, const auth::TokenStore& tokens,
                    cluster::ClusterTokens& cluster_tokens);
// GET /v1/jobs, GET and DELETE /v1/jobs/{name}.
void AddFlJobRoutes(httplib::Server& server, const auth::TokenStore& tokens, ClusterFlJobs& jobs);
// A job as GET /v1/jobs{,/name} shows it (JSON object text).
std::string ClusterJobJson(const ClusterJob& job);

}  // namespace shoal::controller
