// bench-cluster-round: one FL round of --updates ResNet-18-sized updates (an MLP 784-14704-10:
// 11,689,690 float32 parameters, 46.8 MB each) arriving spread over the gateways of a real
// three-node cluster (network namespaces, veths, a bridge, etcd: tests/support/netns_cluster.h),
// the job's top on node 0, in two layouts:
//   hierarchy  LIFL's: each node folds the updates its gateway receives and sends the top one
//              partial sum per round (fl_hierarchy: true, the default);
//   central    every update that enters node 1 or 2 is forwarded whole to node 0, which folds
//              them all (fl_hierarchy: false; the layout of the previous cluster work).
// Figures per round: the bytes the nodes sent over their veths (each node's host-side veth rx
// counter: what crosses node boundaries; the status polls stay on node 0's loopback, and the
// 202s to the senders are a few KB), and the time from the last update byte written to the
// commit (and from the first byte). Anchors: (nodes - 1) partial sums of float32 for the bytes;
// the central layout, same cluster size, same run, for the time. Targets: bytes <= (nodes - 1)
// partial sums; time <= 0.7 x central. A warm-up round (leaves started, pool pages touched)
// precedes --runs measured rounds; min/median/max over the runs, RESULT cluster_round = the
// hierarchy's median time / the central median time.
//
//   bench-cluster-round [--updates N (48)] [--runs R (3)] [--senders S per node (4)]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "netns_peer.h"
#include "run_stats.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/v1/fl.pb.h"
#include "tests/support/netns_cluster.h"
#include "update_sender.h"
#include "update_template.h"

using namespace shoal;
using namespace shoal::testing;
using shoal::bench::Now;
using shoal::bench::SpreadOf;
using shoal::bench::UpdatePrefix;
using Json = nlohmann::json;

namespace {

constexpr uint64_t kHidden = 14704;  // 784-14704-10 MLP: 11,689,690 parameters (ResNet-18's)
constexpr int kNodes = 3;

uint64_t Counter(const std::string& dev, const char* which) {
  std::ifstream f("/sys/class/net/" + dev + "/statistics/" + which);
  uint64_t v = 0;
  f >> v;
  return v;
}

struct Round {
  double tail_s = NAN;    // last update byte written -> commit seen
  double round_s = NAN;   // first byte -> commit
  double nodes_sent = 0;  // bytes the nodes sent over their veths
  uint32_t counted = 0;
  int failures = 0;
};

struct Layout {
  std::string name;
  std::vector<Round> rounds;  // measured (warm-up excluded)
  Json folded_elsewhere;
  bool ok = false;
};

Layout RunLayout(bool hierarchy, int updates, int runs, int senders,
                 const std::vector<std::byte>& area, const v1::UpdateHeader& header) {
  Layout out;
  out.name = hierarchy ? "hierarchy" : "central";
  TestCluster::Options o;
  o.nodes = kNodes;
  o.fl_hierarchy = hierarchy;
  // The top (central: every update) holds a round's updates until the checkpoint behind its
  // commit is written (the next round starts after it, see below).
  o.pool_bytes = (area.size() + 8192) * (static_cast<uint64_t>(updates) + 16);
  TestCluster cluster(o);
  std::string why;
  if (!cluster.Start(&why)) {
    std::printf("  %s: the cluster did not start: %s\n", out.name.c_str(), why.c_str());
    return out;
  }
  const std::string job = "round";
  auto d = cluster.NodeApi(0, "POST", "/v1/functions",
                           "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
                               "\nspec:\n  algorithm: {name: fedavg}\n"
                               "  model: {architecture: mlp, hidden: " +
                               std::to_string(kHidden) +
                               "}\n  clients: {expected: " + std::to_string(updates) +
                               "}\n  stop: {rounds: " + std::to_string(runs + 2) +
                               "}\n  aggregation: {maxFanIn: 2, maxLeaves: 2}\n");
  if (d.status != 201) {
    std::printf("  %s: deploy: %d %s\n", out.name.c_str(), d.status, d.body.c_str());
    return out;
  }
  auto t =
      HttpAt(cluster.node_ip(0), TestCluster::kControlPort, "POST", "/v1/tokens",
             R"({"role": "fl-client", "job": "round"})",
             {"Authorization: Bearer " + cluster.node_token(0), "Content-Type: application/json"},
             0, 10000);
  if (t.status != 201) {
    std::printf("  %s: token: %d %s\n", out.name.c_str(), t.status, t.body.c_str());
    return out;
  }
  const std::string auth =
      "Authorization: Bearer " + Json::parse(t.body)["token"].get<std::string>();
  if (hierarchy) {
    for (int i = 1; i < kNodes; ++i) {
      for (int w = 0; w < 200; ++w) {
        if (cluster.NodeLog(i).find("fl job round: this node folds") != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> ids;
  for (int k = 0; k < updates; ++k) {
    auto r =
        HttpAt(cluster.node_ip(0), TestCluster::kGatewayPort, "POST", "/v1/jobs/" + job + "/join",
               "{}", {auth, "Content-Type: application/json"}, 0, 10000);
    Json j = Json::parse(r.body, nullptr, false);
    ids.emplace_back(j.value("client_id", ""), j.value("token", ""));
  }
  std::vector<std::string> veths;
  for (int i = 0; i < kNodes; ++i) veths.push_back(cluster.host_veth(i));
  for (int round = 0; round <= runs; ++round) {
    const std::vector<std::string> prefixes = shoal::bench::RoundPrefixes(header, job, ids, round);
    std::vector<uint64_t> rx0(kNodes);
    for (int i = 0; i < kNodes; ++i) rx0[i] = Counter(veths[i], "rx_bytes");
    // The commit, seen from inside node 0's namespace (its loopback: no veth bytes).
    std::atomic<double> committed{0};
    std::atomic<uint32_t> counted{0};
    std::atomic<bool> give_up{false};
    std::thread poller([&] {
      if (!shoal::bench::EnterNetns(cluster.netns(0))) return;
      while (!give_up) {
        auto r = HttpAt(cluster.node_ip(0), TestCluster::kControlPort, "GET", "/v1/jobs/" + job, {},
                        {"Authorization: Bearer " + cluster.node_token(0)}, 0, 10000);
        Json st = Json::parse(r.body, nullptr, false);
        if (st.is_object() && st.value("version", 0) >= round + 1) {
          committed = Now();
          for (const auto& v : st["versions"]) {
            if (v.value("version", 0) == round + 1) counted = v.value("updates", 0u);
          }
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    const int total_senders = senders * kNodes;
    std::vector<double> first_write(total_senders, 1e30), last_write(total_senders, 0);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int s = 0; s < total_senders; ++s) {
      threads.emplace_back([&, s] {
        const int node = s % kNodes;
        const int fd = shoal::bench::ConnectTcp(cluster.node_ip(node), TestCluster::kGatewayPort);
        if (fd < 0) {
          ++failures;
          return;
        }
        // Update k enters node k % nodes; that node's senders take its updates in turn.
        for (int k = s; k < updates; k += total_senders) {
          const auto p = shoal::bench::PostUpdate(fd, job, prefixes[k], area, auth);
          if (k == s) first_write[s] = p.write_start;
          last_write[s] = p.write_end;
          if (p.status != 202 && failures++ == 0) {
            std::fprintf(stderr, "bench-cluster-round: %s: update %d via node %d: %s, HTTP %d %s\n",
                         out.name.c_str(), k, node, p.sent ? "sent" : "not sent whole", p.status,
                         p.body.substr(0, 200).c_str());
          }
        }
        close(fd);
      });
    }
    for (auto& th : threads) th.join();
    for (int w = 0; w < 120000 && committed == 0; ++w) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    give_up = true;
    poller.join();
    Round r;
    for (int i = 0; i < kNodes; ++i) {
      r.nodes_sent += static_cast<double>(Counter(veths[i], "rx_bytes") - rx0[i]);
    }
    const double first = *std::min_element(first_write.begin(), first_write.end());
    const double last = *std::max_element(last_write.begin(), last_write.end());
    r.failures = failures;
    r.counted = counted;
    if (committed > 0) {
      r.tail_s = committed - last;
      r.round_s = committed - first;
    }
    std::printf(
        "  %-9s round %d%s: last byte -> commit %.3f s, first byte -> commit %.3f s, "
        "nodes sent %.1f MB, %u update(s) counted, %d failure(s)\n",
        out.name.c_str(), round, round == 0 ? " (warm-up)" : "", r.tail_s, r.round_s,
        r.nodes_sent / 1e6, r.counted, r.failures);
    std::fflush(stdout);
    if (round > 0) out.rounds.push_back(r);
    // Not measured: the checkpoint behind the commit is written and the round's updates go back
    // to the pools before the next round (else the top holds two rounds: 4.5 GB central).
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  auto st = cluster.NodeApi(0, "GET", "/v1/jobs/" + job);
  Json sj = Json::parse(st.body, nullptr, false);
  if (sj.is_object()) out.folded_elsewhere = sj["folded_elsewhere"];
  if (std::getenv("SHOAL_BENCH_LOG")) {
    for (int i = 0; i < kNodes; ++i) std::fprintf(stderr, "%s", cluster.NodeLog(i).c_str());
  }
  out.ok = true;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  int updates = 48, runs = 3, senders = 4;
  shoal::bench::Args args("bench-cluster-round [--updates N] [--runs R] [--senders S]");
  args.Option("--updates", &updates).Option("--runs", &runs).Option("--senders", &senders);
  if (!args.Parse(argc, argv)) return 2;
  if (updates < kNodes || runs < 1 || senders < 1) {
    std::fprintf(stderr, "bench-cluster-round: --updates >= 3, --runs >= 1, --senders >= 1\n");
    return 2;
  }
  if (auto why = NetnsMissing(); !why.empty()) {
    std::printf("bench-cluster-round: SKIPPED: %s\n", why.c_str());
    return 0;
  }
  const model::ModelSpec spec = model::MlpSpec(784, {kHidden}, 10);
  model::Model m = model::InitModel(spec, 1);
  shoal::bench::UpdateTemplate tmpl = shoal::bench::MakeUpdateTemplate(m);
  const v1::UpdateHeader& header = tmpl.header;
  const std::vector<std::byte>& area = tmpl.area;
  const double partial_bytes = static_cast<double>(spec.num_params()) * sizeof(float);
  std::printf(
      "bench-cluster-round: %d nodes, %d updates of %zu float32 (%.2f MB) spread over "
      "their gateways, %d sender(s) per node, %d measured round(s) after a warm-up\n",
      kNodes, updates, spec.num_params(), static_cast<double>(area.size()) / 1e6, senders, runs);
  std::vector<Layout> layouts;
  for (bool hierarchy : {true, false}) {
    layouts.push_back(RunLayout(hierarchy, updates, runs, senders, area, header));
    if (!layouts.back().ok) return 1;
  }
  const double anchor_bytes = (kNodes - 1) * partial_bytes;
  std::printf("\n%-10s | %-26s | %-26s | %-28s | %s\n", "layout", "last byte -> commit (s)",
              "first byte -> commit (s)", "bytes the nodes sent (MB)", "counted / failed");
  std::printf("%-10s | %-26s | %-26s | %-28s |\n", "", "min / median / max", "min / median / max",
              "min / median / max");
  std::vector<shoal::bench::Spread> tails, bytes;
  for (const Layout& l : layouts) {
    std::vector<double> tail, whole, sent;
    uint32_t counted_min = UINT32_MAX;
    int failed = 0;
    for (const Round& r : l.rounds) {
      tail.push_back(r.tail_s);
      whole.push_back(r.round_s);
      sent.push_back(r.nodes_sent / 1e6);
      counted_min = std::min(counted_min, r.counted);
      failed += r.failures;
    }
    const auto t = SpreadOf(tail), w = SpreadOf(whole), b = SpreadOf(sent);
    tails.push_back(t);
    bytes.push_back(b);
    std::printf(
        "%-10s | %7.3f / %7.3f / %7.3f  | %7.3f / %7.3f / %7.3f  | %8.1f / %8.1f / %8.1f  | "
        ">= %u / %d\n",
        l.name.c_str(), t.min, t.median, t.max, w.min, w.median, w.max, b.min, b.median, b.max,
        counted_min, failed);
  }
  std::printf("\nhierarchy: partial sums fetched by the top: %s\n",
              layouts[0].folded_elsewhere.dump().c_str());
  std::printf(
      "cross-node bytes (median): hierarchy %.1f MB = %.4f x (nodes - 1) partial sums "
      "(%.1f MB; target <= 1), central %.1f MB = %.2f x\n",
      bytes[0].median, bytes[0].median * 1e6 / anchor_bytes, anchor_bytes / 1e6, bytes[1].median,
      bytes[1].median * 1e6 / anchor_bytes);
  const double ratio = tails[0].median / tails[1].median;
  std::printf(
      "last byte -> commit: hierarchy / central = %.3f (medians; target <= 0.7); "
      "machine: shared 2-vCPU VM, every node, etcd and the senders on it\n",
      ratio);
  std::printf("RESULT cluster_round ratio=%.3f\n", ratio);
  return 0;
}
