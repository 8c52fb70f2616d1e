#include "shoal/dataplane/gateway/routes.h"

#include <string>

#include "shoal/dataplane/gateway/gateway.h"

namespace shoal {

bool MatchFleetRoute(std::string_view method, std::string_view path, std::string_view* job) {
  static constexpr std::string_view kJobs = "/v1/jobs/";
  if (!path.starts_with(kJobs)) return false;
  path.remove_prefix(kJobs.size());
  const size_t slash = path.find('/');
  const std::string_view name = path.substr(0, slash);
  const std::string_view sub = slash == std::string_view::npos ? "" : path.substr(slash + 1);
  if (name.empty()) return false;
  const bool fleet =
      (sub.empty() && method == "GET") || (sub == "join" && method == "POST") ||
      (sub == "task" && method == "GET") || (sub == "model" && method == "GET") ||
      (sub == "eval" && method == "POST") || (sub == "updates" && method == "POST") ||
      (sub == "secagg" && method == "GET") || (sub.starts_with("secagg/") && method == "POST");
  if (fleet && job != nullptr) *job = name;
  return fleet;
}

bool IsFleetRoute(std::string_view method, std::string_view path, std::string* job) {
  std::string_view name;
  const bool fleet = MatchFleetRoute(method, path, &name);
  if (fleet && job != nullptr) *job = std::string(name);
  return fleet;
}

namespace {

// "{name}[/sub]" -> name, "/sub"
void SplitName(std::string_view rest, RouteMatch& m) {
  const size_t slash = rest.find('/');
  m.name = rest.substr(0, slash);
  m.sub_path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
}

}  // namespace

RouteMatch MatchRoute(std::string_view method, std::string_view path, bool fl_updates) {
  RouteMatch m;
  std::string_view job;
  const bool fleet = MatchFleetRoute(method, path, &job);
  if (fleet) {
    m.job = job;
    m.kind = fl_updates && method == "POST" && path.ends_with("/updates") ? RouteKind::kFlUpdate
                                                                          : RouteKind::kFleet;
    return m;
  }
  if (path.starts_with("/v2/models/")) {
    SplitName(path.substr(11), m);
    m.kind = RouteKind::kModel;
    return m;
  }
  if (path.starts_with("/fn/")) {
    SplitName(path.substr(4), m);
    m.kind = m.name.find('.') != std::string_view::npos ? RouteKind::kInternalFunction
                                                        : RouteKind::kFunction;
    return m;
  }
  if (path.starts_with("/v1/fleet/"))
    m.kind = RouteKind::kFlowerFleet;
  else if (path.starts_with("/v1/") || path == "/v1")
    m.kind = RouteKind::kControlElsewhere;
  else if (path == "/v2" || path == "/v2/")
    m.kind = RouteKind::kV2Server;
  else if (path == "/v2/health/live")
    m.kind = RouteKind::kV2Live;
  else if (path == "/v2/health/ready")
    m.kind = RouteKind::kV2Ready;
  else if (path == "/metrics")
    m.kind = RouteKind::kMetrics;
  else if (path == "/healthz")
    m.kind = RouteKind::kHealthz;
  else if (path == "/readyz")
    m.kind = RouteKind::kReadyz;
  return m;
}

}  // namespace shoal
