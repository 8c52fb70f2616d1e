// Secure aggregation (SecAgg+) across a real cluster (three shoalds in network namespaces, real
// etcd): the job's top is node 0, its clients reach it through every node's gateway (the C++
// clients of shoal/fl/client/secagg_client.h), one drops after sharing its keys. Each node's
// leaves fold the masked inputs that entered it, the top merges the nodes' masked partial sums
// and unmasks once: the unmasked sum equals the survivors' plaintext fixed-point sum exactly,
// the committed model is its decoded mean, and every node serves the same bytes of it.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "cluster_fixture.h"
#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/client/secagg_client.h"
#include "shoal/fl/secagg/crypto.h"
#include "shoal/fl/secagg/masking.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"

namespace shoal::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr int kClients = 6;
constexpr double kClip = 1.0;
constexpr uint32_t kBits = 16;

class ClusterSecAggTest : public ClusterFixture {
 protected:
  void SetUp() override {
    StartCluster({});
    if (IsSkipped() || HasFatalFailure()) return;
    auto r = cluster_->NodeApi(
        0, "POST", "/v1/functions",
        "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: sec\n"
        "spec:\n  algorithm: {name: fedavg}\n"
        "  model: {architecture: mlp, hidden: 8, seed: 3}\n"
        "  data: {dataset: digits}\n  clients: {expected: 6}\n  stop: {rounds: 2}\n"
        "  privacy:\n    secureAggregation: {threshold: 3, neighbours: 4, clipRange: 1.0, "
        "bits: 16, stageTimeout: 5s}\n");
    ASSERT_EQ(r.status, 201) << r.body;
    // Nodes 1 and 2 fold the job's masked inputs once they see node 0 runs it.
    for (int i : {1, 2}) {
      ASSERT_TRUE(NodeLogHas(
          i,
          "fl job sec: this node folds its updates for its top on node " + cluster_->node_name(0),
          10s));
    }
    auto t = MintFlClientToken(*cluster_, 0, "sec");
    ASSERT_EQ(t.status, 201) << t.body;
    token_ = json::parse(t.body)["token"].get<std::string>();
  }
  std::string Url(int node) const {
    return "http://" + cluster_->node_ip(node) + ":" + std::to_string(TestCluster::kGatewayPort);
  }
  json JobStatus() {
    return json::parse(cluster_->NodeApi(0, "GET", "/v1/jobs/sec").body, nullptr, false);
  }
  std::string ModelBytes(int node, uint64_t version) {
    auto r = HttpAt(cluster_->node_ip(node), TestCluster::kGatewayPort, "GET",
                    "/v1/jobs/sec/model?version=" + std::to_string(version), {},
                    {"Authorization: Bearer " + token_}, 0, 10000);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  }

  std::string token_;
  model::ModelSpec spec_ = model::MlpSpec(64, {8}, 10);
};

TEST_F(ClusterSecAggTest, ClientsOnEveryNodeShareOneRoundAndItsSumIsExact) {
  std::vector<std::unique_ptr<client::FlHttpClient>> https;
  std::vector<std::unique_ptr<client::SecAggClient>> clients;
  std::vector<JoinResult> ids;
  for (int k = 0; k < kClients; ++k) {
    // Client k reaches the job through node k % 3's gateway.
    https.push_back(std::make_unique<client::FlHttpClient>(Url(k % 3), "sec", token_));
    std::string name = "c";  // appended: GCC 12 warns falsely on "c" + std::string
    name += std::to_string(k);
    Result<JoinResult> id = Internal("not joined");
    ASSERT_TRUE(WaitFor(
        [&] {
          id = https.back()->Join(name, "");
          return id.ok();
        },
        10s))
        << id.status().ToString();
    ids.push_back(*id);
    clients.push_back(
        std::make_unique<client::SecAggClient>(*https.back(), id->client_id, id->token,
                                               client::SecAggParams{3, kClip, kBits}, nullptr, 20));
  }
  uint64_t round = 0;
  for (auto& c : clients) {
    auto r = c->Advertise();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    round = *r;
  }
  for (auto& c : clients) ASSERT_TRUE(c->Share().ok());
  // Client 5 (on node 2) drops after sharing its keys.
  const size_t n = spec_.num_params();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  secagg::Quantizer quantizer{kClip, kBits};
  std::vector<uint32_t> sum(n, 0);
  for (int k = 0; k < kClients - 1; ++k) {
    std::vector<float> values(n);
    for (float& v : values) v = u(rng);
    std::vector<uint32_t> q(n);
    quantizer.Quantize(values, q);
    for (size_t i = 0; i < n; ++i) sum[i] += q[i];
    auto masked = clients[k]->Mask(values);
    ASSERT_TRUE(masked.ok()) << masked.status().ToString();
    model::UpdateMeta meta;
    meta.job = "sec";
    meta.client_id = ids[k].client_id;
    meta.token = ids[k].token;
    meta.num_samples = 1;
    const Status posted = clients[k]->PostMasked(meta, spec_, *masked);
    ASSERT_TRUE(posted.ok()) << "client " << k << ": " << posted.ToString();
  }
  for (int k = 0; k < kClients - 1; ++k) {
    const Status st = clients[k]->Unmask();
    ASSERT_TRUE(st.ok()) << "client " << k << ": " << st.ToString();
  }
  json info, st;
  ASSERT_TRUE(WaitFor(
      [&] {
        st = JobStatus();
        if (!st.contains("secure_aggregation")) return false;
        for (const json& r : st["secure_aggregation"]["rounds"]) {
          if (r.value("round", uint64_t{0}) == round && r.contains("sum_sha256")) info = r;
        }
        return !info.is_null() && st.value("version", 0) >= 1;
      },
      30s))
      << st.dump();
  const auto digest =
      secagg::Sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(sum.data()), 4 * n));
  EXPECT_EQ(info["sum_sha256"], secagg::Hex(digest)) << info.dump();
  EXPECT_EQ(info["survivors"], 5) << info.dump();
  EXPECT_EQ(info["dropped"], 1) << info.dump();
  // The masked inputs were folded on the nodes they entered: one masked partial sum of the
  // round from each of nodes 1 (clients 1 and 4) and 2 (client 2; client 5 dropped), 4 bytes
  // per parameter, merged at the top modulo 2^32.
  for (auto [node, updates] : {std::pair{1, 2}, std::pair{2, 1}}) {
    ASSERT_TRUE(st["folded_elsewhere"].contains(cluster_->node_name(node))) << st.dump();
    const json& f = st["folded_elsewhere"][cluster_->node_name(node)];
    EXPECT_EQ(f["updates"], updates) << st.dump();
    EXPECT_EQ(f["partial_sums"], 1) << st.dump();
    EXPECT_EQ(f["partial_sum_bytes"], n * 4) << st.dump();
  }
  // The committed model is the survivors' decoded mean, the same bytes on every node.
  std::vector<float> decoded(n);
  quantizer.DecodeSum(sum, kClients - 1, decoded);
  const std::string top = ModelBytes(0, 1);
  auto m = model::ModelFromSafetensors(std::as_bytes(std::span<const char>(top.data(), top.size())),
                                       spec_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (size_t i = 0; i < n; i += 37) {
    EXPECT_NEAR(m->values[i], decoded[i] / (kClients - 1), 1e-6) << i;
  }
  EXPECT_TRUE(ModelBytes(1, 1) == top);
  EXPECT_TRUE(ModelBytes(2, 1) == top);
}

}  // namespace
}  // namespace shoal::testing
