// bench-cluster-failover: how long a function is unavailable when the node running it dies.
// A real three-node cluster (network namespaces, etcd, shoal-controller: tests/support/
// netns_cluster.h); a function with scale {min: 1, max: 1} runs on one node; that shoald is
// killed (-9) and the clock runs until the controller has dropped the node (its lease ended),
// until the function is placed on a surviving node, and until it answers there. Anchor: the
// node lease TTL, which bounds how soon a silent death can be noticed; the ratio is the time
// to answer again over the TTL (min/median/max over --runs, default 5; --ttl S, default 3).
// FL's part (the round's commit after a node loss) needs FL across nodes, not built yet.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/netns_cluster.h"

using namespace shoal::testing;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

struct Spread {
  double min, median, max;
};
Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The node `fn` is placed on ("" when none or several).
std::string PlacedOn(TestCluster& c, const std::string& fn) {
  auto r = c.ControllerApi(0, "GET", "/v1/functions/" + fn);
  auto j = json::parse(r.body, nullptr, false);
  if (r.status != 200 || j.is_discarded() || j["placements"].size() != 1) return "";
  return j["placements"][0]["node"].get<std::string>();
}

int NodeIndex(TestCluster& c, const std::string& name) {
  for (int i = 0; i < c.nodes(); ++i) {
    if (c.node_name(i) == name) return i;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  uint32_t ttl = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--ttl"))
      ttl = static_cast<uint32_t>(std::max(2, std::atoi(argv[i + 1])));
  }
  if (auto why = NetnsMissing(); !why.empty()) {
    std::printf("bench-cluster-failover: SKIPPED: %s\n", why.c_str());
    return 0;
  }
  std::printf("bench-cluster-failover: %d run(s), 3 nodes, node lease TTL %u s\n", runs, ttl);
  std::vector<double> gone, placed, answered;
  int failures = 0;
  for (int run = 0; run < runs; ++run) {
    TestCluster::Options o;
    o.node_lease_ttl_s = ttl;
    TestCluster cluster(o);
    std::string why;
    if (!cluster.Start(&why)) {
      std::printf("run %d: the cluster did not start: %s\n", run, why.c_str());
      return 1;
    }
    auto deploy = Http(cluster.controller_port(0), "POST", "/v1/functions",
                       "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: solo\n"
                       "spec:\n  handler:\n    builtin: echo\n  scale: {min: 1, max: 1}\n",
                       {"Authorization: Bearer " + cluster.controller_token()}, 0, 10000);
    if (deploy.status != 201) {
      std::printf("run %d: deploy failed: %d %s\n", run, deploy.status, deploy.body.c_str());
      return 1;
    }
    int victim = -1;
    for (int t = 0; t < 200 && victim < 0; ++t) {
      victim = NodeIndex(cluster, PlacedOn(cluster, "solo"));
      if (victim >= 0 && cluster.NodeGateway(victim, "POST", "/fn/solo", "x").status != 200) {
        victim = -1;
      }
      if (victim < 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (victim < 0) {
      std::printf("run %d: solo never answered\n", run);
      return 1;
    }
    const auto t0 = Clock::now();
    cluster.StopNode(victim, SIGKILL);
    double t_gone = -1, t_placed = -1, t_answer = -1;
    while (Since(t0) < 30 && (t_answer < 0 || t_gone < 0)) {
      if (t_gone < 0) {
        auto r = cluster.ControllerApi(0, "GET", "/v1/cluster");
        auto j = json::parse(r.body, nullptr, false);
        if (!j.is_discarded() && j.value("nodes", 3) == 2) t_gone = Since(t0);
      }
      const int now_on = NodeIndex(cluster, PlacedOn(cluster, "solo"));
      if (now_on >= 0 && now_on != victim && t_answer < 0) {
        if (t_placed < 0) t_placed = Since(t0);
        if (cluster.NodeGateway(now_on, "POST", "/fn/solo", "again").status == 200) {
          t_answer = Since(t0);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (t_answer < 0 || t_gone < 0) {
      ++failures;
      std::printf("run %d: solo did not answer again within 30 s\n", run);
      continue;
    }
    gone.push_back(t_gone);
    placed.push_back(t_placed);
    answered.push_back(t_answer);
    std::printf("run %d: node %s killed; dropped %.2f s, re-placed %.2f s, answering %.2f s\n", run,
                cluster.node_name(victim).c_str(), t_gone, t_placed, t_answer);
  }
  if (answered.empty()) return 1;
  std::printf("\n%-44s %8s %8s %8s\n", "seconds after the kill -9", "min", "median", "max");
  auto row = [](const char* name, const std::vector<double>& v) {
    const Spread s = SpreadOf(v);
    std::printf("%-44s %8.2f %8.2f %8.2f\n", name, s.min, s.median, s.max);
  };
  row("node dropped by the controller", gone);
  row("function placed on a surviving node", placed);
  row("function answering there", answered);
  std::printf("%-44s %8u\n", "anchor: node lease TTL (s)", ttl);
  std::vector<double> ratio;
  for (double a : answered) ratio.push_back(a / ttl);
  row("ratio: answering again / TTL", ratio);
  std::printf(
      "FL: the round's commit after a node loss is not measured (FL across nodes is not "
      "built yet)\n");
  std::printf("RESULT cluster_failover ratio=%.3f\n", SpreadOf(ratio).median);
  return failures == 0 ? 0 : 1;
}
