// Cluster mode on a real cluster: three shoalds in their own network namespaces (veth + bridge,
// real TCP between them), a real etcd, real shoal-controllers. Nodes register under leases, the
// controller lists them, a killed or cut-off node drops out after its TTL and comes back, a name
// held by a live node is refused, an etcd outage does not stop the data path, and a standby
// controller takes over from a killed leader.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "cluster_fixture.h"

namespace shoal::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class ClusterTest : public ClusterFixture {
 protected:
  // The node names the controller lists (GET /v1/nodes), sorted.
  std::vector<std::string> Listed(int controller = 0) {
    auto r = cluster_->ControllerApi(controller, "GET", "/v1/nodes");
    std::vector<std::string> names;
    if (r.status != 200) return names;
    auto j = json::parse(r.body, nullptr, false);
    if (j.is_discarded()) return names;
    for (const auto& n : j["nodes"]) names.push_back(n["name"].get<std::string>());
    return names;
  }
  // Starts a cluster of `o` and waits until the controller lists each of its nodes.
  void StartListed(const TestCluster::Options& o) {
    StartCluster(o);
    if (IsSkipped() || HasFatalFailure()) return;
    std::vector<int> all(static_cast<size_t>(o.nodes));
    std::iota(all.begin(), all.end(), 0);
    ASSERT_TRUE(WaitFor([&] { return Listed() == Names(all); }, 10s));
  }
  std::vector<std::string> Names(const std::vector<int>& nodes) {
    std::vector<std::string> out;
    for (int i : nodes) out.push_back(cluster_->node_name(i));
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST_F(ClusterTest, NodesRegisterAndTheControllerListsThemWithTheirAddresses) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  // The controller lists the nodes from its watch at once; it leads once it wins the election.
  json j;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = cluster_->ControllerApi(0, "GET", "/v1/nodes");
        if (r.status != 200) return false;
        j = json::parse(r.body, nullptr, false);
        return !j.is_discarded() && j.value("leader", "") == "ctl-0";
      },
      10s))
      << j.dump();
  for (const auto& n : j["nodes"]) {
    const std::string name = n["name"];
    const int i = name[1] - '0';
    EXPECT_EQ(n["address"], cluster_->node_ip(i) + ":8080");
    EXPECT_EQ(n["status"], "Ready");
    EXPECT_EQ(n["protocol"], "1.0");
    EXPECT_GE(n["cores"].get<int>(), 1);
    EXPECT_GT(n["memory_mib"].get<int>(), 0);
  }
  EXPECT_EQ(j["leader"], "ctl-0");
  // Without a token: 401, naming what is missing.
  auto anon = Http(cluster_->controller_port(0), "GET", "/v1/nodes");
  EXPECT_EQ(anon.status, 401);
  EXPECT_NE(anon.body.find("needs a bearer token"), std::string::npos);
  // Each node serves over real TCP from outside its namespace, and says it is registered.
  for (int i = 0; i < 3; ++i) {
    auto ready = cluster_->NodeGateway(i, "GET", "/readyz");
    EXPECT_EQ(ready.status, 200) << ready.error;
    auto metrics = cluster_->NodeGateway(i, "GET", "/metrics");
    EXPECT_NE(metrics.body.find("\nshoal_cluster_etcd_connected 1\n"), std::string::npos);
  }
  auto deployed =
      cluster_->NodeApi(1, "POST", "/v1/functions",
                        "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
                        "spec:\n  handler:\n    builtin: echo\n");
  ASSERT_EQ(deployed.status, 201) << deployed.body;
  auto echo = cluster_->NodeGateway(1, "POST", "/fn/echo", "across the bridge");
  EXPECT_EQ(echo.status, 200) << echo.error;
  EXPECT_EQ(echo.body, "across the bridge");
}

TEST_F(ClusterTest, AKilledNodeDropsOutAfterItsLeaseAndRejoinsWhenRestarted) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  const auto t0 = Clock::now();
  cluster_->StopNode(1, SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 2}); }, 10s));
  const double gone_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GT(gone_s, 1.0);  // the lease (3 s) had to run out: no one revoked it
  EXPECT_LT(gone_s, 3 + 2.5);
  EXPECT_NE(cluster_->ControllerLog(0).find("nodes: " + cluster_->node_name(1) +
                                            " left the cluster (its lease ended)"),
            std::string::npos);
  ASSERT_TRUE(cluster_->StartNode(1)) << cluster_->NodeLog(1);
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 1, 2}); }, 10s));
  // A clean stop leaves at once (the lease is revoked).
  const auto t1 = Clock::now();
  EXPECT_EQ(cluster_->StopNode(2, SIGTERM), 0);
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 1}); }, 5s));
  EXPECT_LT(Clock::now() - t1, 2s);
}

TEST_F(ClusterTest, ANameHeldByALiveNodeIsRefusedNamingIt) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  cluster_->StopNode(2, SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 1}); }, 5s));
  // Node 2's namespace, node 0's name: refused, and node 0 stays listed.
  EXPECT_FALSE(cluster_->StartNode(2, cluster_->node_name(0)));
  // It exits (StartNode waits 10 s; an ASan build on a loaded machine once took longer).
  EXPECT_TRUE(WaitFor([&] { return !cluster_->NodeRunning(2); }, 30s));
  const std::string log = cluster_->NodeLog(2);
  EXPECT_NE(log.find("node name '" + cluster_->node_name(0) + "' is held by a live node at " +
                     cluster_->node_ip(0) + ":8080"),
            std::string::npos)
      << log;
  EXPECT_EQ(Listed(), Names({0, 1}));
}

TEST_F(ClusterTest, ACutOffNodeDropsOutAndRegistersAgainWhenItsLinkIsBack) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  cluster_->SetLink(2, false);
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 1}); }, 10s));
  EXPECT_TRUE(cluster_->NodeRunning(2));  // it serves on, cut off
  // etcd drops it when its lease ends; the node itself says so when its next keep-alive call
  // times out, which on a busy machine can come after the lease's end.
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_->NodeLog(2).find("disconnected: etcd unreachable") != std::string::npos;
      },
      10s))
      << cluster_->NodeLog(2);
  cluster_->SetLink(2, true);
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 1, 2}); }, 15s)) << cluster_->NodeLog(2);
  const std::string log = cluster_->NodeLog(2);
  EXPECT_NE(log.find("disconnected: etcd unreachable"), std::string::npos) << log;
  EXPECT_NE(log.find("registered again at"), std::string::npos) << log;
}

TEST_F(ClusterTest, AnEtcdOutageLeavesTheDataPathServingAndTheNodesComeBack) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  auto deployed =
      cluster_->NodeApi(0, "POST", "/v1/functions",
                        "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
                        "spec:\n  handler:\n    builtin: echo\n");
  ASSERT_EQ(deployed.status, 201) << deployed.body;
  cluster_->etcd().Kill(0);
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_->NodeGateway(0, "GET", "/metrics")
                   .body.find("\nshoal_cluster_etcd_connected 0\n") != std::string::npos;
      },
      10s));
  for (int k = 0; k < 20; ++k) {
    auto r = cluster_->NodeGateway(0, "POST", "/fn/echo", "during the outage " + std::to_string(k));
    ASSERT_EQ(r.status, 200) << r.error << r.body;
    EXPECT_EQ(r.body, "during the outage " + std::to_string(k));
  }
  EXPECT_EQ(cluster_->NodeGateway(0, "GET", "/readyz").status, 200);
  auto controller_ready = Http(cluster_->controller_port(0), "GET", "/readyz");
  EXPECT_EQ(controller_ready.status, 503);
  EXPECT_NE(controller_ready.body.find("etcd: unreachable"), std::string::npos);
  ASSERT_TRUE(cluster_->etcd().Restart(0));
  ASSERT_TRUE(WaitFor([&] { return Listed() == Names({0, 1, 2}); }, 15s));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return cluster_->NodeGateway(i, "GET", "/metrics")
                     .body.find("\nshoal_cluster_etcd_connected 1\n") != std::string::npos;
        },
        10s));
  }
}

TEST_F(ClusterTest, TheStandbyControllerTakesOverFromAKilledLeader) {
  TestCluster::Options o;
  o.nodes = 1;
  o.controllers = 2;
  StartCluster(o);
  if (IsSkipped() || HasFatalFailure()) return;
  auto cluster_info = [&](int j) {
    auto r = cluster_->ControllerApi(j, "GET", "/v1/cluster");
    return r.status == 200 ? json::parse(r.body, nullptr, false) : json();
  };
  ASSERT_TRUE(WaitFor([&] { return cluster_info(1).value("leader", "") == "ctl-0"; }, 10s));
  EXPECT_TRUE(cluster_info(0).value("is_leader", false));
  EXPECT_FALSE(cluster_info(1).value("is_leader", true));
  const auto t0 = Clock::now();
  cluster_->StopController(0, SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return cluster_info(1).value("is_leader", false); }, 10s));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  // The 2 s lease, then the standby's next campaign: a few seconds, with room for a loaded
  // 2-core CI machine (the etcd, both controllers and the node share it); what this guards
  // against is a take-over that waits for something slower than the lease.
  EXPECT_LT(took, 2 + 4.0);
  std::cerr << "[ take-over ] " << took << " s after the leader's kill -9 (lease TTL 2 s)\n";
  EXPECT_EQ(Listed(1), Names({0}));
  auto metrics = Http(cluster_->controller_port(1), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("\nshoal_cluster_leader 1\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("\nshoal_cluster_nodes_ready 1\n"), std::string::npos);
}

// Deploys through the controller (POST /v1/functions) as the admin.
HttpResult ControllerDeploy(TestCluster& c, const std::string& yaml) {
  return Http(c.controller_port(0), "POST", "/v1/functions", yaml,
              {"Authorization: Bearer " + c.controller_token(), "Content-Type: application/yaml"},
              0, 10000);
}

// node -> max of `fn`'s placements, from GET /v1/functions/<fn>.
std::map<std::string, int> PlacedMax(TestCluster& c, const std::string& fn) {
  std::map<std::string, int> out;
  auto r = c.ControllerApi(0, "GET", "/v1/functions/" + fn);
  auto j = json::parse(r.body, nullptr, false);
  if (r.status != 200 || j.is_discarded()) return out;
  for (const auto& p : j["placements"]) out[p["node"].get<std::string>()] = p["max"].get<int>();
  return out;
}

// DELETE /v1/functions/<fn> on the first controller.
HttpResult ControllerDelete(TestCluster& c, const std::string& fn) {
  return Http(c.controller_port(0), "DELETE", "/v1/functions/" + fn, {},
              {"Authorization: Bearer " + c.controller_token()});
}

// Deploys echo (min 0, max 3) on the controller: answered 201 with its function id (2048), its
// `generation`, and whether it was `created`.
void ExpectEchoDeployed(TestCluster& c, int generation, bool created) {
  auto r = ControllerDeploy(c,
                            "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
                            "spec:\n  handler:\n    builtin: echo\n  scale: {min: 0, max: 3}\n");
  ASSERT_EQ(r.status, 201) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["functions"][0]["id"], 2048);
  EXPECT_EQ(j["functions"][0]["generation"], generation);
  EXPECT_EQ(j["functions"][0]["created"], created);
}

TEST_F(ClusterTest, FunctionsDeployedOnTheControllerRunWherePlacedAndMoveOffALostNode) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_NO_FATAL_FAILURE(ExpectEchoDeployed(*cluster_, 1, true));
  const std::map<std::string, int> spread = {
      {cluster_->node_name(0), 1}, {cluster_->node_name(1), 1}, {cluster_->node_name(2), 1}};
  ASSERT_TRUE(WaitFor([&] { return PlacedMax(*cluster_, "echo") == spread; }, 10s))
      << cluster_->ControllerLog(0);
  // Every node runs it: a request entering each node's gateway is answered there.
  for (int i = 0; i < 3; ++i) {
    HttpResult echo;
    ASSERT_TRUE(WaitFor(
        [&] {
          echo = cluster_->NodeGateway(i, "POST", "/fn/echo", "on node " + std::to_string(i));
          return echo.status == 200;
        },
        10s))
        << echo.status << " " << echo.body << cluster_->NodeLog(i);
    EXPECT_EQ(echo.body, "on node " + std::to_string(i));
  }
  // Node 2 is killed: once its lease ends, its share moves to the nodes left (3 = 2 + 1).
  cluster_->StopNode(2, SIGKILL);
  const std::map<std::string, int> moved = {{cluster_->node_name(0), 2},
                                            {cluster_->node_name(1), 1}};
  ASSERT_TRUE(WaitFor([&] { return PlacedMax(*cluster_, "echo") == moved; }, 10s))
      << cluster_->ControllerLog(0);
  // Re-deployed: the same id, the next generation.
  ASSERT_NO_FATAL_FAILURE(ExpectEchoDeployed(*cluster_, 2, false));
  // Deleted: its placements go, and the nodes stop serving it.
  auto del = ControllerDelete(*cluster_, "echo");
  EXPECT_EQ(del.status, 200) << del.body;
  EXPECT_TRUE(WaitFor(
      [&] { return cluster_->NodeGateway(0, "POST", "/fn/echo", "x").status == 404; }, 10s));
  EXPECT_EQ(ControllerDelete(*cluster_, "echo").status, 404);
}

// node -> {min, max} of `fn`'s placements.
std::map<std::string, std::pair<int, int>> PlacedMinMax(TestCluster& c, const std::string& fn) {
  std::map<std::string, std::pair<int, int>> out;
  auto r = c.ControllerApi(0, "GET", "/v1/functions/" + fn);
  auto j = json::parse(r.body, nullptr, false);
  if (r.status != 200 || j.is_discarded()) return out;
  for (const auto& p : j["placements"]) {
    out[p["node"].get<std::string>()] = {p["min"].get<int>(), p["max"].get<int>()};
  }
  return out;
}

TEST_F(ClusterTest, PlacementPutsEachInstanceThroughPlaceAndHoldsOnlyWhatTheNodesHaveRoomFor) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  // Every node registered the same cores (one machine): an instance asking for all of them fits
  // once per node, so 3 of its 5 are placed, one on each node.
  auto nodes = json::parse(cluster_->ControllerApi(0, "GET", "/v1/nodes").body);
  const int cores = nodes["nodes"][0]["cores"].get<int>();
  ASSERT_GE(cores, 1);
  // Echo `name` asking for every core, up to `max` instances.
  auto all_cores = [&](const std::string& name, int max) {
    return ControllerDeploy(*cluster_,
                            "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
                                "\nspec:\n  handler:\n    builtin: echo\n"
                                "  resources: {cpu: \"" +
                                std::to_string(cores) +
                                "\"}\n  scale: {min: 0, max: " + std::to_string(max) + "}\n");
  };
  auto wide = all_cores("wide", 5);
  ASSERT_EQ(wide.status, 201) << wide.body;
  const std::map<std::string, std::pair<int, int>> one_each = {{cluster_->node_name(0), {0, 1}},
                                                               {cluster_->node_name(1), {0, 1}},
                                                               {cluster_->node_name(2), {0, 1}}};
  ASSERT_TRUE(WaitFor([&] { return PlacedMinMax(*cluster_, "wide") == one_each; }, 10s))
      << cluster_->ControllerLog(0);
  EXPECT_NE(cluster_->ControllerLog(0).find("placement: wide: 3 of its 5 instances fit"),
            std::string::npos);
  // The nodes are full of `wide`: a second such function has no room anywhere and is not placed
  // (the deploy itself is accepted: a node could hold it once `wide` goes).
  auto more = all_cores("more", 1);
  ASSERT_EQ(more.status, 201) << more.body;
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_->ControllerLog(0).find(
                   "placement: more: no node has room for an instance") != std::string::npos;
      },
      10s))
      << cluster_->ControllerLog(0);
  EXPECT_TRUE(PlacedMinMax(*cluster_, "more").empty());
  // Deleting `wide` frees the room: `more` is placed.
  ASSERT_EQ(ControllerDelete(*cluster_, "wide").status, 200);
  EXPECT_TRUE(WaitFor([&] { return PlacedMinMax(*cluster_, "more").size() == 1; }, 10s))
      << cluster_->ControllerLog(0);
  ASSERT_EQ(ControllerDelete(*cluster_, "more").status, 200);
  // Instances that reserve no CPU spread over the nodes; min_scale goes to the nodes holding
  // most of the share, one instance at a time.
  auto spread =
      ControllerDeploy(*cluster_,
                       "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: spread\n"
                       "spec:\n  handler:\n    builtin: echo\n  scale: {min: 2, max: 4}\n");
  ASSERT_EQ(spread.status, 201) << spread.body;
  std::map<std::string, std::pair<int, int>> got;
  ASSERT_TRUE(WaitFor(
      [&] {
        got = PlacedMinMax(*cluster_, "spread");
        return got.size() == 3;
      },
      10s));
  int max_sum = 0, min_sum = 0;
  for (const auto& [node, mm] : got) {
    EXPECT_GE(mm.second, 1) << node;
    EXPECT_LE(mm.second, 2) << node;
    EXPECT_LE(mm.first, 1) << node;
    max_sum += mm.second;
    min_sum += mm.first;
  }
  EXPECT_EQ(max_sum, 4);
  EXPECT_EQ(min_sum, 2);
}

// The controller's value of `family{labels}` (-1 when absent).
double ControllerMetric(TestCluster& c, const std::string& series) {
  auto r = c.ControllerApi(0, "GET", "/metrics");
  const size_t at = r.body.find(series + " ");
  return at == std::string::npos ? -1 : std::stod(r.body.substr(at + series.size() + 1));
}

TEST_F(ClusterTest, TheLeaderAutoscalesAClusterFunctionFromEveryNodesSignals) {
  StartListed({});
  if (IsSkipped() || HasFatalFailure()) return;
  auto r = ControllerDeploy(*cluster_,
                            "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: busy\n"
                            "spec:\n  handler:\n    builtin: sleep\n  concurrency: 1\n"
                            "  keepAlive: 1s\n  scale: {min: 0, max: 6}\n  autoscaling:\n"
                            "    policy: kpa\n    params: {stableWindow: 4s, panicWindow: 1s, "
                            "scaleToZeroGrace: 1s}\n");
  ASSERT_EQ(r.status, 201) << r.body;
  ASSERT_TRUE(WaitFor([&] { return PlacedMinMax(*cluster_, "busy").size() == 3; }, 10s));
  auto warm = [&] {
    int sum = 0;
    for (const auto& [node, mm] : PlacedMinMax(*cluster_, "busy")) sum += mm.first;
    return sum;
  };
  EXPECT_EQ(warm(), 0);
  // Six closed-loop clients, two through each node, on a one-request-per-instance function:
  // the nodes' signals sum to about six in flight, and the leader's KPA keeps that many warm
  // across the nodes (their placements' min).
  std::atomic<bool> loading{true};
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int k = 0; k < 6; ++k) {
    clients.emplace_back([&, k] {
      while (loading) {
        auto res = cluster_->NodeGateway(k % 3, "POST", "/fn/busy?ms=200", "");
        (res.status == 200 ? ok : failed)++;
      }
    });
  }
  const bool scaled = WaitFor([&] { return warm() >= 3; }, 20s);
  // The leader may scale on its first tick, before every node's first signals arrived (each
  // node publishes every 2 s): under the same load all three report within a few ticks.
  auto reporting_nodes = [&] {
    return ControllerMetric(*cluster_, "shoal_cluster_autoscaler_signal_nodes{function=\"busy\"}");
  };
  WaitFor([&] { return reporting_nodes() == 3; }, 10s);
  const double desired =
      ControllerMetric(*cluster_, "shoal_cluster_autoscaler_desired{function=\"busy\"}");
  const double reporting = reporting_nodes();
  loading = false;
  for (auto& t : clients) t.join();
  EXPECT_TRUE(scaled) << "warm " << warm() << "\n" << cluster_->ControllerLog(0);
  EXPECT_GE(desired, 3) << cluster_->ControllerLog(0);
  EXPECT_EQ(reporting, 3) << cluster_->ControllerLog(0);
  EXPECT_GT(ok.load(), 20);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_NE(cluster_->ControllerLog(0).find("cluster autoscaler: busy (kpa): "), std::string::npos);
  // Load gone: after KPA's 4 s window the leader wants none warm again (30 s: an ASan build
  // on a loaded machine missed 20 s once in six runs).
  EXPECT_TRUE(WaitFor([&] { return warm() == 0; }, 30s)) << cluster_->ControllerLog(0);
  // The nodes follow their placements' bounds as the leader moves them (same generation):
  // each logs its new share, and none keeps a ready instance once the leader wants none (a
  // node once kept its first placement's min, and the leader's scale-down rate held one warm).
  std::string nodes_logs;
  for (int i = 0; i < 3; ++i) nodes_logs += cluster_->NodeLog(i);
  EXPECT_NE(nodes_logs.find("function busy: scale "), std::string::npos) << nodes_logs;
  auto ready_anywhere = [&] {  // -1: no node shows the series (the function runs nowhere)
    double sum = -1;
    for (int i = 0; i < 3; ++i) {
      const std::string body = cluster_->NodeGateway(i, "GET", "/metrics").body;
      const std::string series = "shoal_instances{function=\"busy\",state=\"ready\"} ";
      const size_t at = body.find(series);
      if (at != std::string::npos)
        sum = std::max(sum, 0.0) + std::stod(body.substr(at + series.size()));
    }
    return sum;
  };
  EXPECT_TRUE(WaitFor([&] { return ready_anywhere() == 0; }, 15s)) << ready_anywhere() << " ready\n"
                                                                   << cluster_->ControllerLog(0);
}

TEST_F(ClusterTest, AFunctionNoNodeCanHoldIsRefusedNamingTheResource) {
  TestCluster::Options o;
  o.nodes = 2;
  StartListed(o);
  if (IsSkipped() || HasFatalFailure()) return;
  auto big =
      ControllerDeploy(*cluster_,
                       "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: big\n"
                       "spec:\n  handler:\n    builtin: echo\n  resources: {cpu: \"1000\"}\n");
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.body.find("big: spec.resources.cpu: 1000 cores fit on no node (the largest has "),
            std::string::npos)
      << big.body;
  auto bad = ControllerDeploy(*cluster_,
                              "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: bad\n"
                              "spec:\n  handler:\n    builtin: echo\n  scale: {min: 3, max: 1}\n");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("spec.scale.max"), std::string::npos) << bad.body;
  // Nothing was written.
  auto list = cluster_->ControllerApi(0, "GET", "/v1/functions");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(json::parse(list.body)["functions"].size(), 0u);
}

}  // namespace
}  // namespace shoal::testing
