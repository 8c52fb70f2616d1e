// The gateway's route table: which family each path belongs to, and the names it carries.
#include "shoal/dataplane/gateway/routes.h"

#include <gtest/gtest.h>

#include <string>

#include "shoal/dataplane/gateway/gateway.h"

namespace shoal {
namespace {

// `method path` is a `kind` route naming `name`, with `sub_path` after the name.
void ExpectRoute(const char* method, const char* path, RouteKind kind, const std::string& name,
                 const std::string& sub_path) {
  const auto m = MatchRoute(method, path, true);
  EXPECT_EQ(m.kind, kind) << path;
  EXPECT_EQ(m.name, name) << path;
  EXPECT_EQ(m.sub_path, sub_path) << path;
}

TEST(Routes, FunctionsWithAndWithoutSubPaths) {
  ExpectRoute("POST", "/fn/echo", RouteKind::kFunction, "echo", "");
  ExpectRoute("GET", "/fn/echo/a/b", RouteKind::kFunction, "echo", "/a/b");
  ExpectRoute("GET", "/fn/", RouteKind::kFunction, "", "");
}

TEST(Routes, InternalFunctionsAreNotReachableByName) {
  const auto m = MatchRoute("POST", "/fn/fl.mnist/x", true);
  EXPECT_EQ(m.kind, RouteKind::kInternalFunction);
  EXPECT_EQ(m.name, "fl.mnist");
}

TEST(Routes, OipModels) {
  ExpectRoute("POST", "/v2/models/resnet/versions/1/infer", RouteKind::kModel, "resnet",
              "/versions/1/infer");
  ExpectRoute("GET", "/v2/models/", RouteKind::kModel, "", "");
}

TEST(Routes, FlUpdatesGoToTheDataPathOnlyWhenTheNodeTakesThem) {
  auto m = MatchRoute("POST", "/v1/jobs/mnist/updates", true);
  EXPECT_EQ(m.kind, RouteKind::kFlUpdate);
  EXPECT_EQ(m.job, "mnist");
  m = MatchRoute("POST", "/v1/jobs/mnist/updates", false);
  EXPECT_EQ(m.kind, RouteKind::kFleet);
  EXPECT_EQ(m.job, "mnist");
  // GET of updates is no fleet route: the control listener's business.
  EXPECT_EQ(MatchRoute("GET", "/v1/jobs/mnist/updates", true).kind, RouteKind::kControlElsewhere);
}

TEST(Routes, FleetRoutesAndTheRestOfTheControlApi) {
  struct Case {
    const char* method;
    const char* path;
    RouteKind kind;
  } cases[] = {
      {"GET", "/v1/jobs/j", RouteKind::kFleet},
      {"POST", "/v1/jobs/j/join", RouteKind::kFleet},
      {"GET", "/v1/jobs/j/task", RouteKind::kFleet},
      {"GET", "/v1/jobs/j/model", RouteKind::kFleet},
      {"POST", "/v1/jobs/j/eval", RouteKind::kFleet},
      {"GET", "/v1/jobs/j/join", RouteKind::kControlElsewhere},
      {"DELETE", "/v1/jobs/j", RouteKind::kControlElsewhere},
      {"GET", "/v1/jobs/", RouteKind::kControlElsewhere},
      {"GET", "/v1/functions", RouteKind::kControlElsewhere},
      {"GET", "/v1", RouteKind::kControlElsewhere},
      // Flower's Fleet API (its own answer to a wrong method, shoal/fl/flower).
      {"POST", "/v1/fleet/pull-messages", RouteKind::kFlowerFleet},
      {"GET", "/v1/fleet/push-object", RouteKind::kFlowerFleet},
      {"GET", "/v1/fleet", RouteKind::kControlElsewhere},
      {"GET", "/v2", RouteKind::kV2Server},
      {"GET", "/v2/", RouteKind::kV2Server},
      {"GET", "/v2/health/live", RouteKind::kV2Live},
      {"GET", "/v2/health/ready", RouteKind::kV2Ready},
      {"GET", "/metrics", RouteKind::kMetrics},
      {"GET", "/healthz", RouteKind::kHealthz},
      {"GET", "/readyz", RouteKind::kReadyz},
      {"GET", "/", RouteKind::kNotFound},
      {"GET", "/v10", RouteKind::kNotFound},
      {"GET", "/fnx", RouteKind::kNotFound},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(MatchRoute(c.method, c.path, true).kind, c.kind) << c.method << " " << c.path;
  }
  EXPECT_EQ(MatchRoute("POST", "/v1/jobs/j/join", true).job, "j");
}

TEST(Routes, IsFleetRouteNamesTheJob) {
  std::string job;
  EXPECT_TRUE(IsFleetRoute("POST", "/v1/jobs/cifar/eval", &job));
  EXPECT_EQ(job, "cifar");
  job = "unchanged";
  EXPECT_FALSE(IsFleetRoute("POST", "/v1/jobs/cifar/deploy", &job));
  EXPECT_EQ(job, "unchanged");
}

}  // namespace
}  // namespace shoal
