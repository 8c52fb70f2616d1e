// Roles and the authorization rule of Shoal's control plane. A token carries one role, scoped
// to a namespace (deployer, invoker) or an FL job (fl-client); Authorize() says whether that
// principal may take an action on a namespace or a job, with a message that names both.
#pragma once

#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::auth {

enum class Role {
  kAdmin,     // everything, tokens included
  kDeployer,  // deploy, delete, read, logs and invoke in one namespace (and its FL jobs)
  kViewer,    // read-only: get, describe, top, node, job status, in every namespace
  kInvoker,   // invoke one namespace's functions that ask for a token (auth: token)
  kFlClient,  // join, fetch tasks and models, push updates and evaluations: one FL job
};

const char* RoleName(Role role);
// "admin", "deployer", "viewer", "invoker", "fl-client"; kInvalidArgument names the choices.
Result<Role> ParseRole(std::string_view name);

// Who made a request: the token's id, its name and its role with the role's scope.
struct Principal {
  std::string token_id;
  std::string name;
  Role role = Role::kViewer;
  std::string ns;   // kDeployer, kInvoker
  std::string job;  // kFlClient
  // "token 'ci' (deployer of namespace 'a')": for log lines and 403 messages.
  std::string Describe() const;
};

enum class Action {
  kRead,          // get, list, describe, logs excluded
  kReadNode,      // top, node
  kWrite,         // deploy, delete
  kLogs,          // instance logs
  kInvoke,        // /fn and /v2 of a function with auth: token
  kFlClient,      // join, task, model, updates, eval of one job
  kManageTokens,  // create, list, revoke tokens
};

const char* ActionName(Action action);

// Whether `who` may take `action` on namespace `ns` (and FL job `job`, for job routes; empty
// otherwise). kPermissionDenied (HTTP 403) with a message naming the token, its role and what
// it lacks.
Status Authorize(const Principal& who, Action action, std::string_view ns,
                 std::string_view job = {});

}  // namespace shoal::auth
