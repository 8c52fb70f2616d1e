// Poisoned FL through a real shoald (issue 17, parts 3 and 4): FedAvg on sklearn's digits with 8
// shoal-client clients, 2 of them attacking (--attack scale:-10 --attackers 2). With no robust
// rule the model collapses; with spec.aggregation.robust median or krum the job reaches its
// target anyway, and the attackers (client-6, client-7) are the suspects in the job status, in
// `shoal fl status` and in /metrics. And the colluding "little is enough" attack (--attack lie):
// the attackers send one pooled model every round, and Krum flags only honest clients.
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoal/tools/flsim/mlp_trainer.h"
#include "tests/support/shoald_data_test.h"
#include "tests/support/text_checks.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
constexpr int kClients = 8;
constexpr int kAttackers = 2;

std::string Manifest(const std::string& name, const std::string& robust, double accuracy,
                     int rounds) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n"
         "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 64, seed: 1}\n"
         "  data: {dataset: digits}\n  clients: {expected: " +
         std::to_string(kClients) +
         "}\n"
         "  stop: {rounds: " +
         std::to_string(rounds) + ", accuracy: " + std::to_string(accuracy) +
         "}\n  training: {localSteps: 40, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation:\n    maxFanIn: 4\n    maxLeaves: 2\n" +
         (robust.empty() ? "" : "    robust: " + robust + "\n");
}

class FlRobustTest : public DigitsShoaldTest {
 protected:
  struct Run {
    std::string out;  // shoal-client's output
    Json status;
    double accuracy = 0;  // the last version's, scored here on the test split
    uint64_t version = 0;
  };
  // Deploys the job, runs 8 shoal-client clients (2 attacking) until it is done or
  // max_seconds, and scores its last version on the digits test split.
  Run Train(const std::string& name, const std::string& robust, double accuracy, int rounds,
            const std::string& attack = "scale:-10") {
    Run run;
    const auto d = shoald_.Deploy(Manifest(name, robust, accuracy, rounds));
    EXPECT_EQ(d.exit_code, 0) << d.out << d.err;
    const std::string token = shoald_.CreateToken("fl-client", "", name);
    EXPECT_FALSE(token.empty());
    int rc = -1;
    run.out =
        RunShoalClient(ServerOf(shoald_), token,
                       "--job " + name + " --data digits --clients " + std::to_string(kClients) +
                           " --partition iid --seed 3 --time-scale 0 --max-seconds 40"
                           " --attack " +
                           attack + " --attackers " + std::to_string(kAttackers),
                       &rc);
    EXPECT_EQ(rc, 0) << run.out;
    run.status = Json::parse(shoald_.Api("GET", "/v1/jobs/" + name).body, nullptr, false);
    run.version = run.status.value("version", uint64_t{0});
    const std::vector<float> w = ModelOf(name, run.version, model::MlpSpec(64, {64}, 10));
    if (w.empty()) return run;
    auto eval = client::Evaluate({64, 64, 10}, w, data_.test);
    EXPECT_TRUE(eval.ok());
    run.accuracy = eval.ok() ? eval->accuracy : 0;
    std::cerr << name << ": version " << run.version << ", test accuracy " << run.accuracy << " on "
              << data_.test.num_samples << " samples\n";
    return run;
  }
  // The attackers are client-6 and client-7; precision and recall of the suspects per update.
  void ExpectAttackersAreTheSuspects(const Run& run, const std::string& job,
                                     const std::string& rule) {
    ASSERT_TRUE(run.status.contains("robust")) << run.status.dump();
    std::set<std::string> attackers, suspects;
    uint64_t tp = 0, fp = 0, fn = 0;
    for (const Json& c : run.status["clients"]["list"]) {
      const std::string name = c.value("name", "");
      const bool attacker = name == "client-6" || name == "client-7";
      const uint64_t updates = c.value("updates", uint64_t{0});
      const uint64_t flagged = c.value("suspect_updates", uint64_t{0});
      if (attacker) {
        attackers.insert(c.value("id", ""));
        tp += flagged;
        fn += updates - flagged;
        EXPECT_GE(flagged, updates * 9 / 10) << c.dump();
        EXPECT_GE(updates, 1u) << c.dump();
      } else {
        fp += flagged;
        EXPECT_LE(flagged * 10, updates) << c.dump();
      }
    }
    for (const Json& s : run.status["robust"]["suspects"]) {
      if (s.value("suspect_updates", uint64_t{0}) * 2 > s.value("updates", uint64_t{1})) {
        suspects.insert(s.value("id", ""));
      }
    }
    EXPECT_EQ(suspects, attackers) << run.status["robust"].dump();
    const double precision = tp + fp == 0 ? 0 : double(tp) / double(tp + fp);
    const double recall = tp + fn == 0 ? 0 : double(tp) / double(tp + fn);
    std::cerr << job << " (" << rule << "): suspect updates precision " << precision << ", recall "
              << recall << "\n";
    // /metrics: shoal_fl_suspect_updates_total{job,client,rule} per attacker.
    for (const std::string& id : attackers) {
      EXPECT_GE(shoald_.Metric("shoal_fl_suspect_updates_total",
                               "client=\"" + id + "\",job=\"" + job + "\",rule=\"" + rule + "\""),
                1.0)
          << id;
    }
    // shoal fl status names them.
    const auto cli = shoald_.Cli({"fl", "status", job});
    EXPECT_EQ(cli.exit_code, 0) << cli.err;
    EXPECT_TRUE(Contains(cli.out, "Suspects:\n"));
    EXPECT_TRUE(Contains(cli.out, "client-6"));
    EXPECT_TRUE(Contains(cli.out, "client-7"));
  }
};

TEST_F(FlRobustTest, ScaledUpdatesCollapseFedAvgAndRobustRulesWithstandThem) {
  // No rule: the mean step is (6 - 2 x 10) / 8 = -1.75 times the honest one.
  const Run plain = Train("plain", "", 0.93, 20);
  EXPECT_LT(plain.accuracy, 0.5) << plain.out;
  EXPECT_FALSE(plain.status.contains("robust"));

  const Run median = Train("median", "{rule: median}", 0.93, 60);
  EXPECT_GE(median.accuracy, 0.9) << median.out;
  ExpectAttackersAreTheSuspects(median, "median", "median");

  const Run krum = Train("krum", "{rule: krum, f: 2}", 0.93, 60);
  EXPECT_GE(krum.accuracy, 0.9) << krum.out;
  ExpectAttackersAreTheSuspects(krum, "krum", "krum");
}

// The colluding "little is enough" attack (--attack lie): client-6 and client-7 train honestly,
// pool their models each round and both send mean - z std of them, z = z_max(8, 2) =
// Phi^-1(5/8) = 0.3186. Inside the honest spread, Krum never flags them.
TEST_F(FlRobustTest, LittleIsEnoughAttackersColludeEveryRoundAndKrumDoesNotFlagThem) {
  const Run krum = Train("liekrum", "{rule: krum, f: 2}", 1.0, 15, "lie");
  EXPECT_EQ(krum.version, 15u) << krum.out;
  EXPECT_TRUE(Contains(krum.out,
                       "attack lie:0.318639 by 2 of 8 clients: client-6 .. client-7 "
                       "(colluding: each round's attackers pool their honest models and send "
                       "mean - 0.3186 std; z_max for n 8, f 2)"));
  EXPECT_TRUE(Contains(krum.out,
                       "shoal-client: lie: 30 updates sent as the colluders' mean - 0.3186 "
                       "std (2.00 attackers pooled per update), 0 sent honest"));
  uint64_t honest_flagged = 0;
  for (const Json& c : krum.status["clients"]["list"]) {
    const std::string name = c.value("name", "");
    if (name == "client-6" || name == "client-7") {
      EXPECT_EQ(c.value("updates", uint64_t{0}), 15u) << c.dump();
      EXPECT_EQ(c.value("suspect_updates", uint64_t{0}), 0u) << c.dump();
    } else {
      honest_flagged += c.value("suspect_updates", uint64_t{0});
    }
  }
  EXPECT_EQ(honest_flagged, 30u);  // Krum drops f = 2 per round: all of them honest ones
}

// A rule the round size cannot carry is a 400 naming the field, through the CLI.
TEST_F(FlRobustTest, KrumThatCannotToleratefIsRefusedAtDeploy) {
  const auto d = shoald_.Deploy(Manifest("bad", "{rule: krum, f: 3}", 0.9, 10));
  EXPECT_NE(d.exit_code, 0);
  EXPECT_TRUE(Contains((d.out + d.err),
                       "spec.aggregation.robust.f: krum tolerates f byzantine updates "
                       "among n only when n > 2f + 2 = 8"))
      << d.out << d.err;
  EXPECT_EQ(shoald_.Api("GET", "/v1/jobs/bad").status, 404);
}

}  // namespace
}  // namespace shoal::testing
