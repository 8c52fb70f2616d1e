// What the control API's two files share (control_api.cc: routing, functions, tokens, top;
// control_api_jobs.cc: FL jobs): JSON replies and errors, query parsing, who may list what.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "shoal/common/query_string.h"
#include "shoal/control/node/control_api.h"
#include "shoal/security/auth/token_store.h"

namespace shoal::control_api_internal {

using nlohmann::json;

HttpReply Json(int status, const json& j);

HttpReply Error(int status, const std::string& message);

// A Status as its HTTP status and message.
HttpReply StatusError(const Status& st);

inline constexpr const char* kJobsDisabled = "FL jobs are not enabled on this node";

HttpReply MethodNotAllowed(std::string_view method, std::string_view path, const char* allow);

// A listing shows a deployer its own namespace only; viewers and admins see every namespace.
bool Lists(const auth::Principal& who, const std::string& ns);

json JobDeployJson(const FlJobSpec& s, bool created);

// The body of a join or eval request: a JSON object (an empty body reads as {}).
std::optional<json> JsonObject(std::string_view body);

}  // namespace shoal::control_api_internal
