// The gateway's route table: which of its API families a request path belongs to. Pure
// matching on (method, path); what a route needs (a function, a token, a pool buffer) is
// checked by the connection that serves it.
//   /fn/{function}[/sub/path]            a function (names with '.' are internal: 404)
//   /v2/models/{model}[/...]             the function serving an OIP model
//   POST /v1/jobs/{job}/updates          an FL update, to the job's leaf aggregators
//   /v1/jobs/{job}[/join|task|model|eval] the FL clients' ("fleet") control routes
//   POST /v1/fleet/{rpc}                 Flower 1.42's Fleet API (shoal/fl/flower), for Flower jobs
//   /v1/...                              the rest of the control API: not on this listener
//   /v2, /v2/health/{live,ready}, /metrics, /healthz, /readyz
#pragma once

#include <string_view>

namespace shoal {

enum class RouteKind {
  kFunction,          // name, sub_path
  kInternalFunction,  // name: a function only its own route reaches (404)
  kModel,             // name (the model; may be empty), sub_path
  kFlUpdate,          // job
  kFleet,             // job
  kFlowerFleet,       // Flower's Fleet API (the SuperNodes of jobs with spec.flower)
  kControlElsewhere,  // a /v1 route the control listener serves
  kV2Server,
  kV2Live,
  kV2Ready,
  kMetrics,
  kHealthz,
  kReadyz,
  kNotFound,
};

struct RouteMatch {
  RouteKind kind = RouteKind::kNotFound;
  std::string_view name;      // function or model
  std::string_view sub_path;  // "" or "/..." after the function or model
  std::string_view job;       // FL job
};

// `fl_updates`: this node takes FL updates on the data path (otherwise POST .../updates is an
// ordinary fleet route). The views point into `path`.
RouteMatch MatchRoute(std::string_view method, std::string_view path, bool fl_updates);

// Whether `method path` is a fleet route; `job` gets the job's name.
bool MatchFleetRoute(std::string_view method, std::string_view path, std::string_view* job);

}  // namespace shoal
