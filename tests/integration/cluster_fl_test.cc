// LIFL's hierarchy across the nodes of a real cluster (three shoalds in network namespaces,
// real etcd): an FL update entering a node whose job's top is on another node is folded on the
// node it entered (the top admits it on its header and merges that node's one partial sum of
// the round), the committed model is the FedAvg of every update wherever it entered, and a node
// killed mid-round loses no update it acknowledged: its clients are told to train again.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "cluster_fixture.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"
#include "tests/support/update_for_test.h"

namespace shoal::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class ClusterFlTest : public ClusterFixture {
 protected:
  struct Client {
    std::string id, token;
  };
  void SetUp() override {
    StartCluster(Options());
    if (IsSkipped() || HasFatalFailure()) return;
    // The job's top is node 0; clients: 3, one round.
    ASSERT_NO_FATAL_FAILURE(DeployJob());
    // Nodes 1 and 2 fold the job's updates once they see node 0 runs it.
    for (int i : {1, 2}) ASSERT_TRUE(FoldsForTopOn(i, 0));
    for (int k = 0; k < 3; ++k) {
      // Joined through node k's gateway (forwarded to the top, which holds the tokens).
      auto j = Join(k, "c" + std::to_string(k));
      ASSERT_EQ(j.status, 200) << j.body;
      auto b = json::parse(j.body);
      clients_.push_back({b["client_id"].get<std::string>(), b["token"].get<std::string>()});
    }
    w0_ = Download(0, 0);
    ASSERT_FALSE(w0_.empty());
  }
  static constexpr const char* kJob =
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: mix\n"
      "spec:\n  algorithm: {name: fedavg}\n"
      "  model: {architecture: mlp, hidden: 8, seed: 3}\n"
      "  data: {dataset: digits}\n  clients: {expected: 3}\n"
      "  stop: {rounds: 2}\n";
  // Deployed on node 0's control API, and its clients' bearer token one of node 0's.
  virtual void DeployJob() {
    auto r = cluster_->NodeApi(0, "POST", "/v1/functions", kJob);
    ASSERT_EQ(r.status, 201) << r.body;
    ASSERT_NO_FATAL_FAILURE(UseTokenOfNode(0));
  }
  // The clients' bearer token becomes a new fl-client token of node i's.
  void UseTokenOfNode(int i) {
    auto t = MintFlClientToken(*cluster_, i, "mix");
    ASSERT_EQ(t.status, 201) << t.body;
    auth_ = "Authorization: Bearer " + json::parse(t.body)["token"].get<std::string>();
  }
  // A client named `name` joins through node i's gateway.
  HttpResult Join(int i, const std::string& name) {
    return HttpAt(cluster_->node_ip(i), TestCluster::kGatewayPort, "POST", "/v1/jobs/mix/join",
                  "{\"name\":\"" + name + "\"}", {auth_, "Content-Type: application/json"}, 0,
                  10000);
  }
  // Whether node i folds the job's updates for its top on node `top` within 10 s.
  ::testing::AssertionResult FoldsForTopOn(int i, int top) {
    return NodeLogHas(
        i,
        "fl job mix: this node folds its updates for its top on node " + cluster_->node_name(top),
        10s);
  }
  // Whether `read` (a job status) reaches version `v` within 10 s; `st` holds its last answer.
  ::testing::AssertionResult VersionReaches(const std::function<json()>& read, int v, json* st) {
    if (WaitFor([&] { return (*st = read()).value("version", 0) >= v; }, 10s)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << st->dump();
  }
  // Each {node, client} sends its update from version v (model `base`), each acknowledged.
  void SendAll(std::initializer_list<std::pair<int, int>> sends, uint64_t v,
               const std::vector<float>& base) {
    for (auto [node, k] : sends) ASSERT_EQ(Send(node, k, auth_, v, base).status, 202);
  }
  void SendAll(std::initializer_list<std::pair<int, int>> sends) { SendAll(sends, 0, w0_); }
  // GET of the job's model version 0 through node i's gateway with the clients' token.
  int ModelStatusAt(int i) {
    return HttpAt(cluster_->node_ip(i), TestCluster::kGatewayPort, "GET",
                  "/v1/jobs/mix/model?version=0", {}, {auth_}, 0, 10000)
        .status;
  }
  virtual TestCluster::Options Options() { return {}; }
  std::vector<float> Download(int node, uint64_t version, std::string* bytes = nullptr) {
    auto r = HttpAt(cluster_->node_ip(node), TestCluster::kGatewayPort, "GET",
                    "/v1/jobs/mix/model?version=" + std::to_string(version), {}, {auth_}, 0, 10000);
    EXPECT_EQ(r.status, 200) << r.body;
    if (bytes != nullptr) *bytes = r.body;
    auto m = model::ModelFromSafetensors(
        std::as_bytes(std::span<const char>(r.body.data(), r.body.size())), mspec_);
    return m.ok() ? m->values : std::vector<float>{};
  }
  std::vector<float> X(int k) { return X(k, w0_); }
  std::vector<float> X(int k, const std::vector<float>& base) {
    std::vector<float> x = base;
    for (size_t i = 0; i < x.size(); ++i) x[i] += float(k + 1) / 8.0f - float(i % 5) / 32.0f;
    return x;
  }
  // Client k's update (from version 0, 100 (k + 1) samples) through node `node`'s gateway.
  HttpResult Send(int node, int k, const std::string& auth) { return Send(node, k, auth, 0, w0_); }
  HttpResult Send(int node, int k, const std::string& auth, uint64_t v,
                  const std::vector<float>& base) {
    const uint64_t samples = 100 * (k + 1);
    return HttpAt(
        cluster_->node_ip(node), TestCluster::kGatewayPort, "POST", "/v1/jobs/mix/updates",
        UpdateBody(mspec_, X(k, base), "mix", clients_[k].id, clients_[k].token, v, samples),
        {auth, "Content-Type: application/octet-stream"}, 0, 10000);
  }
  json Status(int node = 0) {
    auto r = cluster_->NodeApi(node, "GET", "/v1/jobs/mix");
    return json::parse(r.body, nullptr, false);
  }
  std::string TaskKind(int node, int k) {
    auto r = HttpAt(cluster_->node_ip(node), TestCluster::kGatewayPort, "GET",
                    "/v1/jobs/mix/task?client=" + clients_[k].id + "&token=" + clients_[k].token,
                    {}, {auth_}, 0, 10000);
    return json::parse(r.body, nullptr, false).value("kind", "");
  }
  // FedAvg of clients `ks`' updates: Σ n_k x_k / Σ n_k.
  void ExpectFedAvg(const std::vector<float>& got) { ExpectFedAvg(got, w0_); }
  void ExpectFedAvg(const std::vector<float>& got, const std::vector<float>& base) {
    ASSERT_EQ(got.size(), base.size());
    for (size_t i = 0; i < got.size(); ++i) {
      double acc = 0, n = 0;
      for (int k = 0; k < 3; ++k) {
        acc += 100.0 * (k + 1) * X(k, base)[i];
        n += 100.0 * (k + 1);
      }
      ASSERT_NEAR(got[i], acc / n, 1e-5) << i;
    }
  }

  std::string auth_;
  std::vector<Client> clients_;
  model::ModelSpec mspec_ = model::MlpSpec(64, {8}, 10);
  std::vector<float> w0_;
};

TEST_F(ClusterFlTest, AnUpdateIsFoldedOnTheNodeItEntersAndTheTopMergesOnePartialSumPerNode) {
  const std::string fwd =
      "function=\"fl.mix\",node=\"" + cluster_->node_name(0) + "\",result=\"ok\"";
  const double forwards_before =
      Metric(cluster_->NodeGateway(1, "GET", "/metrics").body, "shoal_forwards_total", fwd);
  // A bearer token the top does not know: refused by the top, through node 1's admit request.
  auto bad = Send(1, 1, "Authorization: Bearer shoal_nottherighttoken");
  EXPECT_EQ(bad.status, 401) << bad.body;
  auto a = Send(0, 0, auth_);  // at the top
  ASSERT_EQ(a.status, 202) << a.body;
  auto b = Send(1, 1, auth_);  // folded on node 1
  ASSERT_EQ(b.status, 202) << b.body;
  // The update itself never crossed to node 0 as a forwarded request.
  EXPECT_EQ(Metric(cluster_->NodeGateway(1, "GET", "/metrics").body, "shoal_forwards_total", fwd),
            forwards_before);
  // Its client's next task waits for the round, as at the top (the top counted it).
  EXPECT_EQ(TaskKind(1, 1), "wait");
  auto c = Send(2, 2, auth_);  // folded on node 2: the round is complete
  ASSERT_EQ(c.status, 202) << c.body;
  json st;
  ASSERT_TRUE(VersionReaches([&] { return Status(); }, 1, &st));
  EXPECT_EQ(st["versions"].back()["updates"], 3) << st.dump();
  // One partial sum of the round from each of nodes 1 and 2, float32 x params each.
  const size_t params = w0_.size();
  for (int i : {1, 2}) {
    const json& n = st["folded_elsewhere"][cluster_->node_name(i)];
    EXPECT_EQ(n["updates"], 1) << st.dump();
    EXPECT_EQ(n["partial_sums"], 1) << st.dump();
    EXPECT_EQ(n["partial_sum_bytes"], params * 4) << st.dump();
  }
  // The committed model is the FedAvg of all three, and every node serves the same bytes.
  std::string top_bytes, node1_bytes, node2_bytes;
  ExpectFedAvg(Download(0, 1, &top_bytes));
  Download(1, 1, &node1_bytes);
  Download(2, 1, &node2_bytes);
  EXPECT_TRUE(top_bytes == node1_bytes);
  EXPECT_TRUE(top_bytes == node2_bytes);

  // The peer links authenticate with the cluster's secret: the nodes never refused one another,
  // but a process on node 1's address that calls node 0's peer port without the handshake is
  // answered the 401 frame and closed (the IP check alone would have let it in).
  for (int i = 0; i < 3; ++i) {
    const std::string log = cluster_->NodeLog(i);
    EXPECT_EQ(log.find("failed the peer handshake"), std::string::npos) << log;
    EXPECT_EQ(log.find("has not read the cluster's peer secret"), std::string::npos) << log;
  }
  const std::string call =
      "ip netns exec " + cluster_->netns(1) + " bash -c 'exec 3<>/dev/tcp/" + cluster_->node_ip(0) +
      "/8082 && printf \"SHFP\\x02\\0\\0\\0\\x02\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0"
      "\\0\\0\\0\\0{}\" >&3 && timeout 5 cat <&3' 2>&1";
  std::string answer;
  if (FILE* f = popen(call.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) answer.append(buf, n);
    pclose(f);
  }
  EXPECT_NE(answer.find("fl peer: the link did not start with the cluster's peer handshake"),
            std::string::npos)
      << answer;
  EXPECT_TRUE(NodeLogHas(
      0, "fl peer: connection from " + cluster_->node_ip(1) + " refused: the link did not start",
      5s));
  // Counted on node 0's /metrics; the other nodes refused nothing.
  EXPECT_NE(
      cluster_->NodeGateway(0, "GET", "/metrics").body.find("shoal_fl_peer_refused_total 1\n"),
      std::string::npos);
  EXPECT_NE(
      cluster_->NodeGateway(1, "GET", "/metrics").body.find("shoal_fl_peer_refused_total 0\n"),
      std::string::npos);
}

TEST_F(ClusterFlTest, ANodeKilledMidRoundLosesNoUpdateItAcknowledged) {
  // Two updates acknowledged by node 2 (durable there): the round waits for the third.
  ASSERT_NO_FATAL_FAILURE(SendAll({{2, 1}, {2, 2}}));
  // Node 2 tells the top behind its 202s (its report of a folded update is one message on the
  // peer link, not a round trip in the update's path): the top counts both soon after.
  json st;
  ASSERT_TRUE(WaitFor([&] { return (st = Status()).value("updates_total", 0) == 2; }, 10s))
      << st.dump();
  EXPECT_EQ(TaskKind(1, 1), "wait");
  // Node 2 dies before the round is due: its partial sum never reaches the top.
  cluster_->StopNode(2, SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        st = Status();
        return st["folded_elsewhere"][cluster_->node_name(2)].value("lost_updates", 0) == 2;
      },
      15s))
      << st.dump();
  EXPECT_EQ(st["updates_total"], 0) << st.dump();
  // Their clients are told to train and send again (their task is no longer "wait").
  EXPECT_EQ(TaskKind(1, 1), "train");
  EXPECT_EQ(TaskKind(0, 2), "train");
  ASSERT_NO_FATAL_FAILURE(SendAll({{1, 1}, {0, 2}, {0, 0}}));
  ASSERT_TRUE(VersionReaches([&] { return Status(); }, 1, &st));
  EXPECT_EQ(st["versions"].back()["updates"], 3) << st.dump();
  ExpectFedAvg(Download(1, 1));
}

// The nodes share one checkpoint store (checkpoint_dir; a ReadWriteMany volume on Kubernetes).
class ClusterFlTakeOverTest : public ClusterFlTest {
 protected:
  TestCluster::Options Options() override {
    TestCluster::Options o;
    o.shared_checkpoints = true;
    return o;
  }
};

TEST_F(ClusterFlTakeOverTest, WhenTheTopsNodeIsKilledAnotherNodeResumesTheJobFromItsCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(SendAll({{0, 0}, {1, 1}, {2, 2}}));
  json st;
  ASSERT_TRUE(VersionReaches([&] { return Status(); }, 1, &st));
  std::string v1_bytes;
  const std::vector<float> w1 = Download(0, 1, &v1_bytes);
  // A join answers once its own checkpoint is written: version 1's is written before it.
  ASSERT_EQ(Join(0, "late").status, 200);
  // Round 2 has begun when node 0 dies: node 1 had acknowledged client 1's update.
  ASSERT_EQ(Send(1, 1, auth_, 1, w1).status, 202);
  cluster_->StopNode(0, SIGKILL);
  // Node 1 (the first live node by name) takes the job over once node 0's lease is gone.
  ASSERT_TRUE(
      NodeLogHas(1, "fl job mix: this node took it over from node " + cluster_->node_name(0), 20s));
  st = Status(1);
  EXPECT_EQ(st["version"], 1) << st.dump();
  EXPECT_EQ(st["clients"]["joined"], 4) << st.dump();
  // Tokens are per node: the clients' bearer token is one of node 1's now (the clients' own ids
  // and tokens came with the checkpoint).
  ASSERT_NO_FATAL_FAILURE(UseTokenOfNode(1));
  std::string served;
  Download(1, 1, &served);
  EXPECT_TRUE(served == v1_bytes);  // the checkpoint's model, byte for byte
  // Node 2 folds for the new top.
  ASSERT_TRUE(FoldsForTopOn(2, 1));
  // Client 1's round-2 update was in no checkpoint: it is asked for again.
  EXPECT_EQ(TaskKind(2, 1), "train");
  ASSERT_NO_FATAL_FAILURE(SendAll({{1, 0}, {2, 1}, {2, 2}}, 1, w1));
  ASSERT_TRUE(VersionReaches([&] { return Status(1); }, 2, &st));
  EXPECT_EQ(st["folded_elsewhere"][cluster_->node_name(2)]["partial_sums"], 1) << st.dump();
  ExpectFedAvg(Download(2, 2), w1);
}

// Through shoal-controller: the FLJob and its clients' token come from the controller (the token
// is the cluster's, accepted on every node), the controller chooses the top and serves the job's
// status from etcd, moves the job off a lost top, and deletes it.
// The nodes share one checkpoint store, as in ClusterFlTakeOverTest.
class ClusterFlControllerTest : public ClusterFlTakeOverTest {
 protected:
  HttpResult Controller(const std::string& method, const std::string& path,
                        const std::string& body = {}, const std::string& token = {}) {
    return Http(cluster_->controller_port(0), method, path, body,
                {"Authorization: Bearer " + (token.empty() ? cluster_->controller_token() : token),
                 "Content-Type: application/yaml"},
                0, 10000);
  }
  json ControllerStatus() {
    return json::parse(Controller("GET", "/v1/jobs/mix").body, nullptr, false);
  }
  void DeployJob() override {
    // A bad manifest is refused with the field, and nothing is written.
    std::string bad = kJob;
    bad.replace(bad.find("expected: 3"), 11, "expected: 0");
    auto refused = Controller("POST", "/v1/functions", bad);
    EXPECT_EQ(refused.status, 400) << refused.body;
    EXPECT_NE(refused.body.find("spec.clients.expected"), std::string::npos) << refused.body;
    EXPECT_EQ(Controller("GET", "/v1/jobs/mix").status, 404);
    // A deployer of another namespace may not deploy into default.
    auto dep = Controller("POST", "/v1/tokens", R"({"role": "deployer", "namespace": "team-b"})");
    ASSERT_EQ(dep.status, 201) << dep.body;
    auto forbidden = Controller("POST", "/v1/functions", kJob,
                                json::parse(dep.body)["token"].get<std::string>());
    EXPECT_EQ(forbidden.status, 403) << forbidden.body;

    auto r = Controller("POST", "/v1/functions", kJob);
    ASSERT_EQ(r.status, 201) << r.body;
    auto deployed = json::parse(r.body);
    ASSERT_EQ(deployed["jobs"].size(), 1u) << r.body;
    // Equal nodes: the first by name (no FL job on any yet).
    EXPECT_EQ(deployed["jobs"][0]["top"], cluster_->node_name(0)) << r.body;
    EXPECT_EQ(deployed["jobs"][0]["created"], true) << r.body;
    ASSERT_TRUE(NodeLogHas(0, "fl job mix: generation 1 runs on this node, its top", 10s));
    auto t = Controller("POST", "/v1/tokens", R"({"role": "fl-client", "job": "mix"})");
    ASSERT_EQ(t.status, 201) << t.body;
    token_id_ = json::parse(t.body)["id"].get<std::string>();
    auth_ = "Authorization: Bearer " + json::parse(t.body)["token"].get<std::string>();
    // Every node accepts the cluster's new token once its watch has it.
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(WaitFor([&] { return ModelStatusAt(i) == 200; }, 10s)) << "node " << i;
    }
  }
  std::string token_id_;
};

TEST_F(ClusterFlControllerTest, TheControllersJobRunsOnItsTopMovesOffALostTopAndIsDeleted) {
  ASSERT_NO_FATAL_FAILURE(SendAll({{0, 0}, {1, 1}, {2, 2}}));
  // The controller shows the top's published state (etcd), version 1 from all three.
  json st;
  ASSERT_TRUE(VersionReaches([&] { return ControllerStatus(); }, 1, &st));
  EXPECT_EQ(st["top"], cluster_->node_name(0)) << st.dump();
  EXPECT_EQ(st["updates_total"], 3) << st.dump();
  EXPECT_EQ(st["clients"]["joined"], 3) << st.dump();
  EXPECT_EQ(st["state"], "running") << st.dump();
  std::string v1_bytes;
  const std::vector<float> w1 = Download(0, 1, &v1_bytes);
  ExpectFedAvg(w1);
  // The list holds it too, and `shoal fl status` reads the controller as it reads a node.
  auto list = json::parse(Controller("GET", "/v1/jobs").body, nullptr, false);
  ASSERT_EQ(list["jobs"].size(), 1u) << list.dump();
  EXPECT_EQ(list["jobs"][0]["name"], "mix");
  EXPECT_EQ(list["jobs"][0]["algorithm"], "fedavg");
  auto cli =
      RunCli({"fl", "status", "mix"}, {},
             {"SHOAL_SERVER=http://127.0.0.1:" + std::to_string(cluster_->controller_port(0)),
              "SHOAL_TOKEN=" + cluster_->controller_token()});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find("Algorithm:     fedavg"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("Version:       1 (round"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("Updates:       3"), std::string::npos) << cli.out;
  // A join answers once its checkpoint is written: version 1's is written before it.
  ASSERT_EQ(Join(0, "late").status, 200);

  // The top's node dies: the controller moves the job to node 1 (the first live by name), which
  // resumes it from the shared checkpoint store.
  cluster_->StopNode(0, SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        st = ControllerStatus();
        return st.value("top", "") == cluster_->node_name(1) && st.value("version", 0) == 1;
      },
      20s))
      << st.dump() << cluster_->ControllerLog(0);
  EXPECT_EQ(st["moved_from"], cluster_->node_name(0)) << st.dump();
  EXPECT_EQ(st["clients"]["joined"], 4) << st.dump();
  EXPECT_NE(
      cluster_->NodeLog(1).find("fl job mix: this node is its top now (moved here from node " +
                                cluster_->node_name(0)),
      std::string::npos)
      << cluster_->NodeLog(1);
  // The clients' token is the cluster's: it still works, on the new top.
  std::string served;
  Download(1, 1, &served);
  EXPECT_TRUE(served == v1_bytes);  // the checkpoint's model, byte for byte
  ASSERT_TRUE(FoldsForTopOn(2, 1));
  ASSERT_NO_FATAL_FAILURE(SendAll({{1, 0}, {2, 1}, {2, 2}}, 1, w1));
  ASSERT_TRUE(VersionReaches([&] { return ControllerStatus(); }, 2, &st));
  EXPECT_EQ(st["top"], cluster_->node_name(1)) << st.dump();
  ExpectFedAvg(Download(2, 2), w1);

  // Version 2 is the last (stop.rounds 2): the job is done. Its evaluation, taken by the top,
  // reaches etcd too: the controller's status converges to the top's (state, version, the
  // versions' accuracies, the best accuracy), without another commit.
  const json eval = {{"client_id", clients_[0].id},
                     {"token", clients_[0].token},
                     {"version", 2},
                     {"accuracy", 0.875},
                     {"loss", 0.25},
                     {"samples", 100}};
  auto ev = HttpAt(cluster_->node_ip(1), TestCluster::kGatewayPort, "POST", "/v1/jobs/mix/eval",
                   eval.dump(), {auth_, "Content-Type: application/json"}, 0, 10000);
  ASSERT_EQ(ev.status / 100, 2) << ev.body;
  const json top = Status(1);
  ASSERT_EQ(top.value("state", ""), "done") << top.dump();
  ASSERT_EQ(top.value("best_accuracy", 0.0), 0.875) << top.dump();
  auto same = [&](const json& c) {
    return c.value("state", "") == top["state"] && c.value("version", -1) == top["version"] &&
           c.value("best_accuracy", -1.0) == top["best_accuracy"] && c.contains("versions") &&
           c["versions"].back() == top["versions"].back();
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        st = ControllerStatus();
        return same(st);
      },
      10s))
      << "controller: " << st.dump() << "\ntop: " << top.dump();

  // Revoked at the controller: refused on every node once their watch has it.
  ASSERT_EQ(Controller("DELETE", "/v1/tokens/" + token_id_).status, 200);
  ASSERT_TRUE(WaitFor([&] { return ModelStatusAt(2) == 401; }, 10s));
  // Deleted through the controller: gone from its top and from etcd.
  auto del = Controller("DELETE", "/v1/jobs/mix");
  ASSERT_EQ(del.status, 200) << del.body;
  ASSERT_TRUE(NodeLogHas(1, "fl job mix deleted", 10s));
  EXPECT_EQ(cluster_->NodeApi(1, "GET", "/v1/jobs/mix").status, 404);
  auto gone = Controller("GET", "/v1/jobs/mix");
  EXPECT_EQ(gone.status, 404) << gone.body;
  EXPECT_NE(gone.body.find("no FL job mix"), std::string::npos) << gone.body;
}

}  // namespace
}  // namespace shoal::testing
