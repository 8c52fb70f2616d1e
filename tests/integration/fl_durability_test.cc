// spec.durability: partialSums end to end through a real shoald (issue 34 item 2): a round whose
// updates add up to three times the node's pool commits the exact FedAvg (the updates' buffers
// go back to the pool once folded; the partial sum is checkpointed instead), and after a kill -9
// between a checkpoint and the commit the clients whose acknowledged updates no checkpoint
// includes are asked to send again and the committed model is the same, byte for byte.
//
// The clients' weights are multiples of 1/64 in [-2, 2] and every update counts 64 samples, so
// every partial and total sum is exact in float32 whatever the order of the additions: the
// reference below (the weighted mean in double) is what any correct fold must give bit for bit.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/loopback.h"
#include "tests/support/shoald_fixture.h"
#include "tests/support/update_for_test.h"
#include "tests/support/wait_for.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
// 814 k parameters: a 3.26 MB update; the pool (16 MiB, the least shoald takes) holds about five.
constexpr uint32_t kHidden = 1024;
constexpr int kClients = 16;  // 52 MB of updates in the round: 3.1 x the pool
constexpr uint64_t kPoolBytes = 16ull << 20;

struct Client {
  std::string id, token;
};

class FlDurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.pool_bytes = kPoolBytes;
    options_.max_body_bytes = 8ull << 20;
    if (auto why = ShoaldShortOfHugepages(options_.pool_bytes); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(shoald_.Start(options_)) << shoald_.Log();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  void Deploy(const std::string& job, const std::string& durability) {
    const auto r = shoald_.Deploy(
        "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
        "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: " +
        std::to_string(kHidden) + "}\n  clients: {expected: " + std::to_string(kClients) +
        "}\n  stop: {rounds: 1}\n  aggregation: {maxFanIn: 1, maxLeaves: 1, device: cpu}\n" +
        durability);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  }
  std::vector<Client> JoinAll(const std::string& job) {
    std::vector<Client> out;
    for (int k = 0; k < kClients; ++k) {
      auto r = shoald_.Api("POST", "/v1/jobs/" + job + "/join", "{}",
                           {"Content-Type: application/json"});
      EXPECT_EQ(r.status, 200) << r.body;
      auto j = Json::parse(r.body, nullptr, false);
      out.push_back({j.value("client_id", ""), j.value("token", "")});
    }
    return out;
  }
  Json Status(const std::string& job) {
    return Json::parse(shoald_.Api("GET", "/v1/jobs/" + job).body, nullptr, false);
  }
  std::string TaskKind(const std::string& job, const Client& c) {
    auto r = shoald_.Api("GET", "/v1/jobs/" + job + "/task?client=" + c.id + "&token=" + c.token);
    return Json::parse(r.body, nullptr, false).value("kind", "");
  }
  std::vector<float> Download(const std::string& job, uint64_t version) {
    auto r = shoald_.Api("GET", "/v1/jobs/" + job + "/model?version=" + std::to_string(version));
    EXPECT_EQ(r.status, 200) << r.body;
    auto m = model::ModelFromSafetensors(
        std::as_bytes(std::span<const char>(r.body.data(), r.body.size())), spec_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->values : std::vector<float>{};
  }
  // Retried while the leaf is not up yet (or restarting).
  HttpResult Push(const std::string& job, const std::string& body) {
    HttpResult r;
    for (int attempt = 0; attempt < 200; ++attempt) {
      r = Http(shoald_.port(), "POST", "/v1/jobs/" + job + "/updates", body,
               {"Content-Type: application/octet-stream", shoald_.AuthHeader()});
      if (r.status != 502 && r.status != 503 && r.status != 404) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return r;
  }
  bool WaitVersion(const std::string& job, uint64_t v) {
    return WaitFor([&] { return Status(job).value("version", uint64_t{0}) >= v; },
                   std::chrono::seconds(30));
  }
  static float Weight(size_t i, int k) {
    return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(k) * 13) % 257) - 128) /
           64.0f;
  }
  std::string Body(const std::string& job, const Client& c, int k) {
    std::vector<float> w(spec_.num_params());
    for (size_t i = 0; i < w.size(); ++i) w[i] = Weight(i, k);
    return UpdateBody(spec_, std::move(w), job, c.id, c.token, 0, 64);
  }
  // FedAvg of the 16 clients' weights (equal sample counts: their mean), exact.
  std::vector<float> Reference() const {
    std::vector<float> want(spec_.num_params());
    for (size_t i = 0; i < want.size(); ++i) {
      double s = 0;
      for (int k = 0; k < kClients; ++k) s += 64.0 * Weight(i, k);
      want[i] = static_cast<float>(s / (64.0 * kClients));
    }
    return want;
  }
  static bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  Shoald::Options options_;
  Shoald shoald_;
  model::ModelSpec spec_ = model::MlpSpec(784, {kHidden}, 10);
};

TEST_F(FlDurabilityTest, ARoundOfThreeTimesThePoolCommitsTheExactFedAvg) {
  ASSERT_GT(Body("x", {"c0", "t"}, 0).size() * kClients, 3 * kPoolBytes);
  Deploy("sums", "  durability: {mode: partialSums, checkpointEvery: 4}\n");
  const std::vector<Client> clients = JoinAll("sums");
  for (int k = 0; k < kClients; ++k) {
    const HttpResult r = Push("sums", Body("sums", clients[k], k));
    ASSERT_EQ(r.status, 202) << "update " << k << ": " << r.body;
  }
  ASSERT_TRUE(WaitVersion("sums", 1)) << Status("sums").dump();
  EXPECT_TRUE(SameBytes(Download("sums", 1), Reference()));
  const Json st = Status("sums");
  EXPECT_EQ(st["durability"].value("mode", ""), "partialSums");
  EXPECT_EQ(st["durability"].value("partial_checkpoints", 0), kClients / 4) << st.dump();
  EXPECT_EQ(st["durability"].value("resend_asked", 1), 0);

  // The same round with every update held whole until its commit does not fit this pool.
  Deploy("held", "");
  const std::vector<Client> held = JoinAll("held");
  std::string refusal;
  for (int k = 0; k < kClients && refusal.empty(); ++k) {
    const HttpResult r =
        Http(shoald_.port(), "POST", "/v1/jobs/held/updates", Body("held", held[k], k),
             {"Content-Type: application/octet-stream", shoald_.AuthHeader()});
    if (r.status != 202) refusal = std::to_string(r.status) + " " + r.body;
  }
  EXPECT_NE(refusal.find("full"), std::string::npos) << refusal;
}

TEST_F(FlDurabilityTest, AfterKillNineTheUncheckpointedClientsSendAgainAndTheModelIsTheSame) {
  Deploy("crash", "  durability: {mode: partialSums, checkpointEvery: 4}\n");
  const std::vector<Client> clients = JoinAll("crash");
  // Ten updates acknowledged: the partial sum checkpointed after the 4th and the 8th.
  for (int k = 0; k < 10; ++k) {
    const HttpResult r = Push("crash", Body("crash", clients[k], k));
    ASSERT_EQ(r.status, 202) << "update " << k << ": " << r.body;
  }
  ASSERT_TRUE(
      WaitFor([&] { return Status("crash")["durability"].value("partial_checkpoints", 0) == 2; },
              std::chrono::seconds(10)))
      << Status("crash").dump();
  shoald_.Stop(SIGKILL);
  ASSERT_TRUE(shoald_.Start(options_)) << shoald_.Log();

  const Json st = Status("crash");
  EXPECT_EQ(st.value("version", uint64_t{9}), 0u);
  EXPECT_EQ(st["durability"].value("resend_asked", 0), 2) << st.dump();
  EXPECT_EQ(st.value("updates_total", 0), 8) << st.dump();
  for (int k : {8, 9}) {
    EXPECT_NE(shoald_.Log().find("acknowledged update " + std::to_string(k + 1) + " of client " +
                                 clients[k].id +
                                 " (round 1) is in no partial-sum checkpoint "
                                 "(restart): the client is asked to send it again"),
              std::string::npos)
        << k;
  }
  // The checkpointed clients wait for the round; the two lost ones, and those that never sent,
  // are told to train (and send) for version 0 again.
  for (int k = 0; k < kClients; ++k) {
    EXPECT_EQ(TaskKind("crash", clients[k]), k < 8 ? "wait" : "train") << k;
  }
  for (int k = 8; k < kClients; ++k) {
    const HttpResult r = Push("crash", Body("crash", clients[k], k));
    ASSERT_EQ(r.status, 202) << "update " << k << ": " << r.body;
  }
  ASSERT_TRUE(WaitVersion("crash", 1)) << Status("crash").dump();
  EXPECT_TRUE(SameBytes(Download("crash", 1), Reference()));
  // The restarted leaf folded on into the loaded partial sum (the same additions, in the same
  // order, as without the crash).
  EXPECT_NE(shoald_.Log().find("version 1 committed from 16 update(s) over 1 leaf partial sum(s)"),
            std::string::npos);
}

}  // namespace
}  // namespace shoal::testing
