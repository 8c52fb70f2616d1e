#include "shoal/control/placement/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace shoal {
namespace {

ClusterModel ThreeNodes() {
  ClusterModel c;
  c.AddNode("a", {8, 16384, 0}, 3.0);
  c.AddNode("b", {8, 16384, 0}, 2.0);
  c.AddNode("c", {8, 16384, 1}, 1.0);
  return c;
}

// `d` is a placement on node `node`, of kind `kind`.
void ExpectPlaced(const Result<PlacementDecision>& d, size_t node, PlacementKind kind) {
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->node, node);
  EXPECT_EQ(d->kind, kind);
}

// Where a function of 1 core and 256 MiB goes on ThreeNodes (cold starts: a 3 s, b 2 s, c 1 s)
// after `setup`: an idle warm instance beats a node with the code cached, which beats the
// cheapest cold start; another function's cache, or a cached node without room, counts for
// nothing.
TEST(Placement, WarmThenCachedThenTheCheapestColdStart) {
  struct Case {
    const char* what;
    std::function<void(ClusterModel&)> setup;
    const char* function;
    size_t node;
    PlacementKind kind;
    double cold_start_s;
  };
  auto cached_on_a = [](ClusterModel& c) { c.node(0).cached.insert("f"); };
  const std::vector<Case> cases = {
      {"nothing anywhere", [](ClusterModel&) {}, "f", 2, PlacementKind::kCold, 1.0},
      {"cached on a", cached_on_a, "f", 0, PlacementKind::kCached, 3.0},
      {"f cached on a, g placed", cached_on_a, "g", 2, PlacementKind::kCold, 1.0},
      {"cached on a, one idle on b, none left on c",
       [&](ClusterModel& c) {
         cached_on_a(c);
         c.node(1).idle_warm["f"] = 1;
         c.node(2).idle_warm["f"] = 0;
       },
       "f", 1, PlacementKind::kWarm, 0.0},
      {"cached on a, which has no room",
       [&](ClusterModel& c) {
         cached_on_a(c);
         ASSERT_TRUE(c.Allocate(0, {7.5, 0, 0}).ok());
       },
       "f", 2, PlacementKind::kCold, 1.0},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    ClusterModel c = ThreeNodes();
    ASSERT_NO_FATAL_FAILURE(k.setup(c));
    auto d = Place(c, {k.function, {1, 256, 0}});
    ASSERT_NO_FATAL_FAILURE(ExpectPlaced(d, k.node, k.kind));
    EXPECT_DOUBLE_EQ(d->expected_cold_start_s, k.cold_start_s);
  }
}

TEST(Placement, GpuRequestOnlyOnGpuNodes) {
  ClusterModel c = ThreeNodes();
  c.node(0).cached.insert("llm");  // cached but no GPU there
  auto d = Place(c, {"llm", {1, 1024, 1}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->node, 2u);
  ASSERT_TRUE(c.Allocate(2, {1, 1024, 1}).ok());
  auto again = Place(c, {"llm", {1, 1024, 1}});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kResourceExhausted);
  auto two = Place(ThreeNodes(), {"llm", {1, 1024, 2}});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("2 GPUs"), std::string::npos) << two.status().message();
}

TEST(Placement, NoCapacityIsAnErrorWithAReason) {
  ClusterModel c = ThreeNodes();
  auto d = Place(c, {"big", {16, 256, 0}});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(d.status().message().find("big"), std::string::npos);
  EXPECT_FALSE(Place(ClusterModel{}, {"f", {1, 1, 0}}).ok());
  Status s = c.Allocate(1, {9, 0, 0});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("node b"), std::string::npos) << s.message();
  ASSERT_TRUE(c.Allocate(1, {8, 0, 0}).ok());
  c.Release(1, {8, 0, 0});
  EXPECT_TRUE(c.node(1).Fits({8, 0, 0}));
}

TEST(FlPlacement, LeavesFollowGatewayShares) {
  ClusterModel c;
  for (const char* n : {"n0", "n1", "n2", "n3"}) c.AddNode(n, {16, 65536, 0}, 1.0);
  FlPlacementRequest r{"job", 8, {1, 512, 0}, {2, 1024, 0}, {{1, 0.75}, {3, 0.25}}};
  auto p = PlaceFlJob(c, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->leaf_nodes.size(), 8u);
  EXPECT_EQ(std::count(p->leaf_nodes.begin(), p->leaf_nodes.end(), 1u), 6);
  EXPECT_EQ(std::count(p->leaf_nodes.begin(), p->leaf_nodes.end(), 3u), 2);
  EXPECT_EQ(p->top_node, 1u);  // holds most leaves
}

TEST(FlPlacement, OverflowStaysOnGatewaysAndTopFollowsLeaves) {
  ClusterModel c;
  c.AddNode("n0", {16, 65536, 0}, 0.5);  // cheapest, but receives no updates
  c.AddNode("n1", {2, 65536, 0}, 1.0);   // big share, room for 2 leaves only
  c.AddNode("n2", {16, 65536, 0}, 1.0);
  FlPlacementRequest r{"job", 6, {1, 512, 0}, {1, 512, 0}, {{1, 0.8}, {2, 0.2}}};
  auto p = PlaceFlJob(c, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(std::count(p->leaf_nodes.begin(), p->leaf_nodes.end(), 1u), 2);
  EXPECT_EQ(std::count(p->leaf_nodes.begin(), p->leaf_nodes.end(), 2u), 4);
  EXPECT_EQ(std::count(p->leaf_nodes.begin(), p->leaf_nodes.end(), 0u), 0);
  EXPECT_EQ(p->top_node, 2u);  // n2 holds most leaves (and n1 is full)
}

TEST(FlPlacement, NoRoomIsAnError) {
  ClusterModel c;
  c.AddNode("n0", {2, 4096, 0}, 1.0);
  auto p = PlaceFlJob(c, {"job", 3, {1, 512, 0}, {1, 512, 0}, {{0, 1.0}}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("leaf aggregator 3 of 3"), std::string::npos)
      << p.status().message();
  auto top = PlaceFlJob(c, {"job", 2, {1, 512, 0}, {1, 512, 0}, {{0, 1.0}}});
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("top aggregator"), std::string::npos);
  EXPECT_FALSE(PlaceFlJob(c, {"job", 1, {1, 512, 0}, {1, 512, 0}, {{5, 1.0}}}).ok());
}

}  // namespace
}  // namespace shoal
