// shoal-client's privacy end to end through a real shoald: its C++ clients speak SecAgg+
// (shoal/fl/client/secagg_client.h) and local DP (--local-dp-clip/--local-dp-noise).
//  - Stepwise C++ clients with fixed values, one dropping after it shared its keys: the round's
//    unmasked sum (its SHA-256 in the job's status) equals the survivors' plaintext fixed-point
//    sum exactly, and the new model is its decoded mean.
//  - shoal-client trains a secure job to the end: every round commits, no round fails.
//  - Local DP with no noise: each update's change is clipped to C on the client, so the FedAvg
//    model moves by at most C per round, and it does move.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/client/secagg_client.h"
#include "shoal/fl/secagg/crypto.h"
#include "shoal/fl/secagg/masking.h"
#include "shoal/fl/wire/architectures.h"
#include "tests/support/shoald_data_test.h"
#include "tests/support/wait_for.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
constexpr double kClip = 1.0;
constexpr uint32_t kBits = 16;

std::string Manifest(const std::string& name, uint32_t clients, uint32_t rounds,
                     const std::string& privacy) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata: {name: " + name +
         "}\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 16, seed: "
         "1}\n  data: {dataset: digits}\n  clients: {expected: " +
         std::to_string(clients) + "}\n  stop: {rounds: " + std::to_string(rounds) +
         "}\n  training: {localSteps: 20, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 4, maxLeaves: 2}\n" +
         privacy;
}

std::string SecurePrivacy(uint32_t threshold, uint32_t neighbours) {
  return "  privacy:\n    secureAggregation: {threshold: " + std::to_string(threshold) +
         ", neighbours: " + std::to_string(neighbours) + ", clipRange: 1.0, bits: 16, " +
         "stageTimeout: 3s}\n";
}

class FlClientPrivacyTest : public DigitsShoaldTest {
 protected:
  Json JobStatus(const std::string& job) {
    return Json::parse(shoald_.Api("GET", "/v1/jobs/" + job).body, nullptr, false);
  }
  // The job's secure round `round` once it is done or failed (null after 30 s).
  Json SecureRound(const std::string& job, uint64_t round) {
    Json found;
    WaitFor(
        [&] {
          const Json st = JobStatus(job);
          if (!st.contains("secure_aggregation")) return false;
          for (const Json& r : st["secure_aggregation"]["rounds"]) {
            if (r.value("round", uint64_t{0}) == round &&
                (r.contains("sum_sha256") || r.value("stage", "") == "failed")) {
              found = r;
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(30));
    return found;
  }
  model::ModelSpec Spec() const { return model::MlpSpec(64, {16}, 10); }
};

TEST_F(FlClientPrivacyTest, StepwiseClientsWithADropoutSumExactly) {
  const std::string job = "sa";
  std::string token;
  DeployFlJob(Manifest(job, 5, 3, SecurePrivacy(2, 4)), job, &token);
  const model::ModelSpec spec = Spec();
  const size_t n = spec.num_params();

  std::vector<std::unique_ptr<client::FlHttpClient>> https;
  std::vector<std::unique_ptr<client::SecAggClient>> clients;
  std::vector<JoinResult> ids;
  const client::SecAggParams params{2, kClip, kBits};
  for (int k = 0; k < 5; ++k) {
    https.push_back(std::make_unique<client::FlHttpClient>(ServerOf(shoald_), job, token));
    std::string name = "c";  // appended: GCC 12 warns falsely on "c" + std::string
    name += std::to_string(k);
    auto id = https.back()->Join(name, "");
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
    clients.push_back(std::make_unique<client::SecAggClient>(*https.back(), id->client_id,
                                                             id->token, params, nullptr, 20));
  }
  // The job's status names the parameters the runner reads.
  auto parsed = client::SecAggParamsOf(JobStatus(job).dump());
  ASSERT_TRUE(parsed.ok() && parsed->has_value()) << JobStatus(job).dump();
  EXPECT_EQ((*parsed)->threshold, 2u);
  EXPECT_EQ((*parsed)->bits, kBits);
  EXPECT_DOUBLE_EQ((*parsed)->clip_range, kClip);

  uint64_t round = 0;
  for (auto& c : clients) {
    auto r = c->Advertise();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    round = *r;
  }
  for (auto& c : clients) ASSERT_TRUE(c->Share().ok());
  // Client 4 drops after sharing: the others' masks toward it are recovered from its key shares.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<uint64_t> plain(n, 0);
  std::vector<float> mean(n, 0.0f);
  secagg::Quantizer quantizer{kClip, kBits};
  for (int k = 0; k < 4; ++k) {
    std::vector<float> values(n);
    for (float& v : values) v = u(rng);
    std::vector<uint32_t> q(n);
    quantizer.Quantize(values, q);
    for (size_t i = 0; i < n; ++i) plain[i] += q[i];
    auto masked = clients[k]->Mask(values);
    ASSERT_TRUE(masked.ok()) << masked.status().ToString();
    EXPECT_NE(*masked, q);  // what leaves the client is not its quantized input
    model::UpdateMeta meta;
    meta.job = job;
    meta.client_id = ids[k].client_id;
    meta.token = ids[k].token;
    meta.num_samples = 1;
    ASSERT_TRUE(clients[k]->PostMasked(meta, spec, *masked).ok());
  }
  for (int k = 0; k < 4; ++k) {
    const Status st = clients[k]->Unmask();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const Json info = SecureRound(job, round);
  ASSERT_TRUE(info.contains("sum_sha256")) << info.dump() << "\n" << shoald_.Log();
  std::vector<uint32_t> sum32(n);
  for (size_t i = 0; i < n; ++i) sum32[i] = static_cast<uint32_t>(plain[i]);
  const auto digest = secagg::Sha256(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(sum32.data()), 4 * n));
  EXPECT_EQ(info["sum_sha256"], secagg::Hex(digest));
  EXPECT_EQ(info["survivors"], 4) << info.dump();
  EXPECT_EQ(info["dropped"], 1) << info.dump();
  EXPECT_EQ(info["inputs"], 4) << info.dump();

  // The committed model is the survivors' decoded mean.
  ASSERT_TRUE(WaitFor([&] { return JobStatus(job).value("version", uint64_t{0}) >= 1; },
                      std::chrono::seconds(30)));
  std::vector<float> decoded(n);
  quantizer.DecodeSum(sum32, 4, decoded);
  const std::vector<float> model = ModelOf(job, 1, spec);
  ASSERT_EQ(model.size(), n);
  for (size_t i = 0; i < n; i += 97) EXPECT_NEAR(model[i], decoded[i] / 4, 1e-6) << i;
}

TEST_F(FlClientPrivacyTest, ShoalClientTrainsASecureJobToTheEnd) {
  const std::string job = "sc";
  std::string token;
  DeployFlJob(Manifest(job, 4, 3, SecurePrivacy(2, 2)), job, &token);
  const std::string out = RunDigitsClients(job, token, "--max-seconds 120");
  EXPECT_NE(out.find("job " + job +
                     " aggregates securely (SecAgg+: threshold 2, clip range 1, "
                     "16 bits): updates go masked"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("shoal-client: job done"), std::string::npos) << out;
  EXPECT_NE(out.find("secure aggregation: 12 masked updates sent in finished SecAgg+ rounds, 0 "
                     "rounds this client could not finish"),
            std::string::npos)
      << out;
  const Json st = JobStatus(job);
  EXPECT_EQ(st.value("version", uint64_t{0}), 3u) << st.dump();
  int done = 0;
  for (const Json& r : st["secure_aggregation"]["rounds"]) {
    EXPECT_NE(r.value("stage", ""), "failed") << r.dump();
    if (r.contains("sum_sha256")) ++done;
  }
  EXPECT_EQ(done, 3) << st.dump();
}

TEST_F(FlClientPrivacyTest, LocalDpClipsEachUpdateOnTheClient) {
  const std::string job = "ldp";
  std::string token;
  DeployFlJob(Manifest(job, 4, 1, ""), job, &token);
  const std::vector<float> before = ModelOf(job, 0, Spec());
  constexpr double kC = 0.05;
  const std::string out =
      RunDigitsClients(job, token, "--local-dp-clip 0.05 --local-dp-noise 0 --max-seconds 60");
  EXPECT_NE(out.find("shoal-client: job done"), std::string::npos) << out;
  const std::vector<float> after = ModelOf(job, 1, Spec());
  ASSERT_EQ(after.size(), before.size());
  double sq = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    const double d = double(after[i]) - double(before[i]);
    sq += d * d;
  }
  // The mean of changes each of norm <= C has norm <= C; 20 SGD steps move it much further
  // unclipped, so the clip is what bounds it.
  EXPECT_LE(std::sqrt(sq), kC * (1 + 1e-4));
  EXPECT_GT(std::sqrt(sq), kC / 10);
}

TEST_F(FlClientPrivacyTest, LocalDpFlagsAreChecked) {
  int rc = 0;
  std::string out = RunShoalClient(ServerOf(shoald_), "", "--job x --local-dp-noise 1", &rc);
  EXPECT_NE(out.find("--local-dp-noise needs --local-dp-clip C"), std::string::npos) << out;
  EXPECT_NE(rc, 0);
  out = RunShoalClient(ServerOf(shoald_), "", "--job x --local-dp-clip -1", &rc);
  EXPECT_NE(out.find("--local-dp-clip: must be a finite number > 0"), std::string::npos) << out;
  EXPECT_NE(rc, 0);
}

}  // namespace
}  // namespace shoal::testing
