#include "shoal/security/auth/role.h"

namespace shoal::auth {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kDeployer:
      return "deployer";
    case Role::kViewer:
      return "viewer";
    case Role::kInvoker:
      return "invoker";
    case Role::kFlClient:
      return "fl-client";
  }
  return "?";
}

Result<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kAdmin, Role::kDeployer, Role::kViewer, Role::kInvoker, Role::kFlClient}) {
    if (name == RoleName(r)) return r;
  }
  return InvalidArgument("role: must be admin, deployer, viewer, invoker or fl-client, got '" +
                         std::string(name) + "'");
}

const char* ActionName(Action action) {
  switch (action) {
    case Action::kRead:
      return "read";
    case Action::kReadNode:
      return "read the node's load";
    case Action::kWrite:
      return "deploy or delete";
    case Action::kLogs:
      return "read logs";
    case Action::kInvoke:
      return "invoke";
    case Action::kFlClient:
      return "act as an FL client";
    case Action::kManageTokens:
      return "manage tokens";
  }
  return "?";
}

std::string Principal::Describe() const {
  std::string s = "token '" + name + "' (" + RoleName(role);
  if (role == Role::kDeployer || role == Role::kInvoker) s += " of namespace '" + ns + "'";
  if (role == Role::kFlClient) s += " of FL job '" + job + "'";
  return s + ")";
}

Status Authorize(const Principal& who, Action action, std::string_view ns, std::string_view job) {
  bool ok = false;
  switch (who.role) {
    case Role::kAdmin:
      ok = true;
      break;
    case Role::kViewer:
      ok = action == Action::kRead || action == Action::kReadNode;
      break;
    case Role::kDeployer:
      ok = action == Action::kReadNode ||
           (action != Action::kManageTokens && !ns.empty() && ns == who.ns);
      break;
    case Role::kInvoker:
      ok = action == Action::kInvoke && !ns.empty() && ns == who.ns;
      break;
    case Role::kFlClient:
      ok = action == Action::kFlClient && !job.empty() && job == who.job;
      break;
  }
  if (ok) return Status::Ok();
  std::string what = std::string("may not ") + ActionName(action);
  if (!job.empty()) {
    what += " on FL job '" + std::string(job) + "'";
  } else if (!ns.empty()) {
    what += " in namespace '" + std::string(ns) + "'";
  }
  return PermissionDenied(who.Describe() + " " + what);
}

}  // namespace shoal::auth
