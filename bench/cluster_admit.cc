// bench-cluster-admit: the 202 latency of an FL update entering a node that folds it for its
// job's top on another node (its header admitted by the top over the FL peer link before the
// body is read into the pool; issue 14), against the same update entering the top's node
// (admitted locally), in the same run, on a real three-node cluster (network namespaces, veths,
// a bridge, etcd: tests/support/netns_cluster.h). Each update is one HTTP request on a fresh
// connection, from a distinct client; local and member sends alternate, so both see the same
// noise. The member's extra cost is one small admit round trip over the peer link.
// Figures: min/median/max of each per update size; RESULT cluster_admit = the member's median
// / the local median at the larger size.
//
//   bench-cluster-admit [--updates N per side and size (20)]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "run_stats.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "tests/support/netns_cluster.h"

using namespace shoal;
using namespace shoal::testing;
using Json = nlohmann::json;

namespace {

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Side {
  std::vector<double> ms;
  int failures = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int updates = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--updates") == 0) updates = std::atoi(argv[i + 1]);
  }
  if (auto why = NetnsMissing(); !why.empty()) {
    std::printf("bench-cluster-admit: skipped: %s\n", why.c_str());
    return 0;
  }
  TestCluster cluster({});
  std::string why;
  if (!cluster.Start(&why)) {
    std::fprintf(stderr, "bench-cluster-admit: the cluster did not start: %s\n", why.c_str());
    return 1;
  }
  const int hidden[] = {8, 2048};  // 610 and 151,562 float32 parameters: 2.5 KB and 606 KB
  double ratio = 0;
  std::printf("%-10s %-7s %8s %8s %8s  (ms, %d updates each; shared 2-core VM)\n", "update",
              "enters", "min", "median", "max", updates);
  for (int h : hidden) {
    const std::string job = "adm" + std::to_string(h);
    const std::string manifest =
        "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
        "\nspec:\n  algorithm: {name: fedavg}\n" +
        "  model: {architecture: mlp, hidden: " + std::to_string(h) +
        ", seed: 3}\n  data: {dataset: digits}\n" +
        "  clients: {expected: 1000}\n  stop: {rounds: 2}\n";
    auto r = cluster.NodeApi(0, "POST", "/v1/functions", manifest);
    if (r.status != 201) {
      std::fprintf(stderr, "deploying %s: %d %s\n", job.c_str(), r.status, r.body.c_str());
      return 1;
    }
    auto t =
        HttpAt(cluster.node_ip(0), TestCluster::kControlPort, "POST", "/v1/tokens",
               R"({"role": "fl-client", "job": ")" + job + "\"}",
               {"Authorization: Bearer " + cluster.node_token(0), "Content-Type: application/json"},
               0, 10000);
    if (t.status != 201) {
      std::fprintf(stderr, "token: %d %s\n", t.status, t.body.c_str());
      return 1;
    }
    const std::string auth =
        "Authorization: Bearer " + Json::parse(t.body)["token"].get<std::string>();
    const std::string folds = "fl job " + job + ": this node folds its updates for its top";
    for (int i = 0; i < 200 && cluster.NodeLog(1).find(folds) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (cluster.NodeLog(1).find(folds) == std::string::npos) {
      std::fprintf(stderr, "node 1 never folded %s\n", job.c_str());
      return 1;
    }
    const model::ModelSpec mspec = model::MlpSpec(64, {static_cast<uint64_t>(h)}, 10);
    model::Model m(mspec);
    m.values.assign(mspec.num_params(), 0.01f);
    Side local, member;
    for (int i = 0; i < 2 * updates + 2; ++i) {  // the first pair warms up (leaves start)
      auto j = HttpAt(cluster.node_ip(0), TestCluster::kGatewayPort, "POST",
                      "/v1/jobs/" + job + "/join", "{\"name\":\"c" + std::to_string(i) + "\"}",
                      {auth, "Content-Type: application/json"}, 0, 10000);
      if (j.status != 200) {
        std::fprintf(stderr, "join: %d %s\n", j.status, j.body.c_str());
        return 1;
      }
      auto b = Json::parse(j.body);
      model::UpdateMeta meta;
      meta.job = job;
      meta.client_id = b["client_id"].get<std::string>();
      meta.token = b["token"].get<std::string>();
      meta.num_samples = 100;
      auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
      if (!body.ok()) return 1;
      const int node = i % 2;  // 0: the top (local), 1: a member
      const auto t0 = std::chrono::steady_clock::now();
      auto u = HttpAt(cluster.node_ip(node), TestCluster::kGatewayPort, "POST",
                      "/v1/jobs/" + job + "/updates",
                      std::string(reinterpret_cast<const char*>(body->data()), body->size()),
                      {auth, "Content-Type: application/octet-stream"}, 0, 30000);
      const double ms = Ms(std::chrono::steady_clock::now() - t0);
      Side& side = node == 0 ? local : member;
      if (u.status != 202) {
        ++side.failures;
        std::fprintf(stderr, "update via node %d: %d %s %s\n", node, u.status, u.body.c_str(),
                     u.error.c_str());
        continue;
      }
      if (i >= 2) side.ms.push_back(ms);
    }
    const auto l = bench::SpreadOf(local.ms), s = bench::SpreadOf(member.ms);
    const std::string size = std::to_string(mspec.num_params() * 4 / 1000) + " KB";
    std::printf("%-10s %-7s %8.2f %8.2f %8.2f\n", size.c_str(), "top", l.min, l.median, l.max);
    std::printf("%-10s %-7s %8.2f %8.2f %8.2f   member - top (medians): %.2f ms%s\n", size.c_str(),
                "member", s.min, s.median, s.max, s.median - l.median,
                local.failures + member.failures ? "  (FAILURES)" : "");
    ratio = s.median / l.median;
  }
  std::printf("RESULT cluster_admit ratio=%.3f\n", ratio);
  return 0;
}
