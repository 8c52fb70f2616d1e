// spec.aggregation.robust through FlCoordinator: updates admitted from a real shared-memory
// pool, validated by the test as a leaf of a robust job would (it folds nothing: no partial sum
// is named), the rule run at commit over the updates in the pool. The committed model is the
// rule's result computed here by hand, the attacker is the suspect (status and callback), the
// deploy refuses what cannot work, and a restart mid-round loses no acknowledged update.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "coordinator_fixture.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal {
namespace {

using Json = nlohmann::json;
constexpr int kClients = 5;
constexpr int kAttacker = 4;  // sends w0 - 100 everywhere

class RobustCommitTest : public coordinator_test::CoordinatorFixture {
 protected:
  void SetUp() override {
    MakeDirAndPool("shoal-robust-test");
    if (HasFatalFailure()) return;
    Start();
  }
  void Start() {
    fl_ = std::make_unique<FlCoordinator>(config_);
    fl_->SetOnSuspect(
        [this](const std::string& job, const std::string& client, const std::string& rule) {
          std::lock_guard lock(mu_);
          suspects_.emplace_back(job, client, rule);
        });
  }
  FlJobSpec Spec(const std::string& rule) {
    FlJobSpec spec = RbSpec(kClients);
    spec.robust.rule = rule;
    return spec;
  }
  void Deploy(const FlJobSpec& spec) { DeployAndJoin(spec, kClients, "client-"); }
  // Deploys `spec`, every client sends its update, and version 1 is committed.
  void RunRoundOne(const FlJobSpec& spec) {
    ASSERT_NO_FATAL_FAILURE(Deploy(spec));
    for (int k = 0; k < kClients; ++k) Send(k);
    ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  }
  // Honest client k: w0 plus its own small noise in [-1/16, 1/16]; the attacker: w0 - 100.
  std::vector<float> X(int k) {
    std::vector<float> x = w0_;
    std::mt19937 rng(100 + k);
    std::uniform_real_distribution<float> d(-1.0f / 16, 1.0f / 16);
    for (float& v : x) v += k == kAttacker ? -100.0f : d(rng);
    return x;
  }
  // As the gateway and a robust job's leaf do: the body into a pool buffer, admitted; no partial
  // sum is named (PartialFor answers 0); the leaf's 202 acknowledges it.
  void Send(int k, model::DType dtype = model::DType::kF32) {
    auto body = UpdateBody(k, X(k), dtype);
    ASSERT_TRUE(body.ok());
    auto b = WriteAsGateway(*body);
    ASSERT_TRUE(b.ok());
    auto adm = fl_->Admit("rb", *pool_, b->body, b->buffer);
    ASSERT_TRUE(adm.ok()) << adm.status().ToString();
    auto partial = fl_->PartialFor(adm->ticket, 7);
    ASSERT_TRUE(partial.ok()) << partial.status().ToString();
    EXPECT_EQ(*partial, 0u) << "a robust job's leaves fold into nothing";
    fl_->Completed(adm->ticket, 202, true);
    (void)pool_->Release(b->buffer, kShoaldSlot);
  }
  std::vector<float> Committed(uint64_t v) {
    auto m = fl_->Model("rb", v);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? Values(*m->bytes) : std::vector<float>{};
  }
  // Coordinate-wise median of the five updates, computed here.
  std::vector<float> Median() {
    std::vector<std::vector<float>> xs;
    for (int k = 0; k < kClients; ++k) xs.push_back(X(k));
    std::vector<float> out(w0_.size());
    for (size_t j = 0; j < out.size(); ++j) {
      std::vector<float> col;
      for (const auto& x : xs) col.push_back(x[j]);
      std::sort(col.begin(), col.end());
      out[j] = col[kClients / 2];
    }
    return out;
  }
  static double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      d = std::max(d, double(std::abs(a[i] - b[i])));
    }
    return d;
  }
  void ExpectAttackerIsTheOnlySuspect(const std::string& rule) {
    const Json st = Status();
    ASSERT_TRUE(st.contains("robust")) << st.dump();
    const Json& r = st["robust"];
    EXPECT_EQ(r["last_commit"].value("rule", ""), rule) << r.dump();
    ASSERT_EQ(r["suspects"].size(), 1u) << r.dump();
    EXPECT_EQ(r["suspects"][0].value("id", ""), clients_[kAttacker].client_id);
    EXPECT_EQ(r["suspects"][0].value("name", ""), "client-4");
    EXPECT_EQ(r["suspects"][0].value("suspect_updates", 0), 1);
    ASSERT_EQ(r["last_commit"]["updates"].size(), size_t{kClients});
    for (const Json& u : r["last_commit"]["updates"]) {
      EXPECT_EQ(u.value("suspect", true), u.value("client", "") == clients_[kAttacker].client_id)
          << u.dump();
    }
    for (const Json& c : st["clients"]["list"]) {
      EXPECT_EQ(c.value("suspect_updates", 9), c.value("name", "") == "client-4" ? 1 : 0)
          << c.dump();
      EXPECT_TRUE(c["robust"].is_object()) << c.dump();
    }
    // Called on the commit thread once the job's lock is released, after the version shows.
    using T = std::tuple<std::string, std::string, std::string>;
    for (int i = 0; i < 250; ++i) {
      {
        std::lock_guard lock(mu_);
        if (!suspects_.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::lock_guard lock(mu_);
    EXPECT_EQ(suspects_, (std::vector<T>{{"rb", clients_[kAttacker].client_id, rule}}));
  }

  std::mutex mu_;
  std::vector<std::tuple<std::string, std::string, std::string>> suspects_;
};

// FedAvg with the coordinate-wise median: version 1 is the median of the five updates (the
// attacker's -100 never is), whatever the sample counts; client-4 is the suspect.
TEST_F(RobustCommitTest, MedianCommitsTheCoordinateWiseMedianAndNamesTheAttacker) {
  ASSERT_NO_FATAL_FAILURE(RunRoundOne(Spec("median")));
  EXPECT_LT(MaxDiff(Committed(1), Median()), 1e-6);
  ExpectAttackerIsTheOnlySuspect("median");
  EXPECT_EQ(Status()["versions"][1].value("updates", 0), kClients);
}

// Multi-Krum (f = 1, m = n - f = 4): the mean of the four honest updates, the attacker
// excluded with the highest score.
TEST_F(RobustCommitTest, KrumExcludesTheAttackerAndAveragesTheRest) {
  FlJobSpec spec = Spec("krum");
  spec.robust.f = 1;
  ASSERT_NO_FATAL_FAILURE(RunRoundOne(spec));
  std::vector<float> want(w0_.size(), 0.0f);
  for (int k = 0; k < kClients; ++k) {
    if (k == kAttacker) continue;
    const auto x = X(k);
    for (size_t j = 0; j < want.size(); ++j) want[j] += x[j] / 4;
  }
  EXPECT_LT(MaxDiff(Committed(1), want), 1e-5);
  ExpectAttackerIsTheOnlySuspect("krum");
  const Json updates = Status()["robust"]["last_commit"]["updates"];
  double attacker = 0, worst_honest = 0;
  for (const Json& u : updates) {
    ASSERT_TRUE(u["krum_score"].is_number()) << u.dump();
    if (u.value("client", "") == clients_[kAttacker].client_id) {
      attacker = u["krum_score"].get<double>();
      EXPECT_EQ(u.value("weight", -1.0), 0.0);
    } else {
      worst_honest = std::max(worst_honest, u["krum_score"].get<double>());
    }
  }
  EXPECT_GT(attacker, 100 * worst_honest);
}

// Updates in bf16 and f32 in one round: the rule reads each where it sits, in its dtype.
TEST_F(RobustCommitTest, TrimmedMeanOverMixedDtypes) {
  FlJobSpec spec = Spec("trimmedMean");
  spec.robust.beta = 0.2;  // k = 1 of 5 dropped at each end
  Deploy(spec);
  std::vector<std::vector<float>> xs;
  for (int k = 0; k < kClients; ++k) {
    const model::DType dt = k % 2 == 0 ? model::DType::kBF16 : model::DType::kF32;
    Send(k, dt);
    std::vector<float> x = X(k);
    if (dt == model::DType::kBF16) {  // what the server sees
      for (float& v : x) v = model::Bf16ToFloat(model::FloatToBf16(v));
    }
    xs.push_back(std::move(x));
  }
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  std::vector<float> want(w0_.size());
  for (size_t j = 0; j < want.size(); ++j) {
    std::vector<float> col;
    for (const auto& x : xs) col.push_back(x[j]);
    std::sort(col.begin(), col.end());
    want[j] = (col[1] + col[2] + col[3]) / 3;
  }
  EXPECT_LT(MaxDiff(Committed(1), want), 1e-5);
  ExpectAttackerIsTheOnlySuspect("trimmedMean");
}

// Clipping alone: every delta scaled to norm <= clipNorm, then the plain mean; the attacker's
// huge delta is the clipped one.
TEST_F(RobustCommitTest, ClipNormAloneClipsTheAttacker) {
  FlJobSpec spec = Spec("none");
  spec.robust.clip_norm = 5;
  ASSERT_NO_FATAL_FAILURE(RunRoundOne(spec));
  std::vector<float> want = w0_;
  for (int k = 0; k < kClients; ++k) {
    const auto x = X(k);
    double norm = 0;
    for (size_t j = 0; j < x.size(); ++j) norm += double(x[j] - w0_[j]) * (x[j] - w0_[j]);
    norm = std::sqrt(norm);
    const double c = norm > 5 ? 5 / norm : 1.0;
    for (size_t j = 0; j < x.size(); ++j) want[j] += float(c * (x[j] - w0_[j]) / kClients);
  }
  EXPECT_LT(MaxDiff(Committed(1), want), 1e-5);
  ExpectAttackerIsTheOnlySuspect("clip");
  const Json st = Status();
  for (const Json& c : st["clients"]["list"]) {
    EXPECT_EQ(c.value("clipped_updates", 9), c.value("name", "") == "client-4" ? 1 : 0);
  }
}

// clipNorm: median alone: every delta clipped to the median of the five deltas' norms, then the
// plain mean; the attacker (the longest delta by far) is the clipped one.
TEST_F(RobustCommitTest, ClipNormMedianClipsToTheMedianNorm) {
  FlJobSpec spec = Spec("none");
  spec.robust.clip_median = true;
  ASSERT_NO_FATAL_FAILURE(RunRoundOne(spec));
  std::vector<double> norms;
  for (int k = 0; k < kClients; ++k) {
    const auto x = X(k);
    double norm = 0;
    for (size_t j = 0; j < x.size(); ++j) norm += double(x[j] - w0_[j]) * (x[j] - w0_[j]);
    norms.push_back(std::sqrt(norm));
  }
  std::vector<double> sorted = norms;
  std::sort(sorted.begin(), sorted.end());
  const double tau = sorted[kClients / 2];
  std::vector<float> want = w0_;
  for (int k = 0; k < kClients; ++k) {
    const auto x = X(k);
    const double c = norms[k] > tau ? tau / norms[k] : 1.0;
    for (size_t j = 0; j < x.size(); ++j) want[j] += float(c * (x[j] - w0_[j]) / kClients);
  }
  EXPECT_LT(MaxDiff(Committed(1), want), 1e-5);
  EXPECT_EQ(Status()["robust"].value("clip_norm", ""), "median");
}

// What cannot work is refused at deploy, naming the field.
TEST_F(RobustCommitTest, DeployRefusesWhatCannotWork) {
  FlJobSpec krum = Spec("krum");
  krum.robust.f = 2;  // n = 5 <= 2f + 2 = 6
  auto st = fl_->DeployJob(krum);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "spec.aggregation.robust.f: krum tolerates f byzantine updates among n only when n > "
            "2f + 2 = 6, and a round commits with 5 update(s) (spec.clients.quorum, else "
            "spec.clients.expected)");
  // Spec(rule) edited by `edit`.
  auto edited = [this](const std::string& rule, const std::function<void(FlJobSpec&)>& edit) {
    FlJobSpec s = Spec(rule);
    edit(s);
    return s;
  };
  const std::pair<FlJobSpec, std::string> kRefused[] = {
      // A round can commit with 3 at its deadline.
      {edited("krum",
              [](FlJobSpec& s) {
                s.robust.f = 1;
                s.round_deadline_s = 30;
                s.quorum = 3;
              }),
       "spec.aggregation.robust.f: krum tolerates f byzantine updates among n only when n > "
       "2f + 2 = 4, and a round can commit with 3 update(s) (spec.clients.quorum at "
       "spec.deadlines.round)"},
      {edited("krum", [](FlJobSpec& s) { s.robust.m = 5; }),
       "spec.aggregation.robust.m: krum averages at most n - f = 4 updates, and a round "
       "commits with 5 update(s) (spec.clients.quorum, else spec.clients.expected)"},
      {edited("median", [](FlJobSpec& s) { s.algorithm = "fedasync"; }),
       "spec.aggregation.robust: robust rules run over a round's updates trained from one "
       "model version: algorithm fedasync mixes base versions (use fedavg, fedavgm or "
       "fedadam)"},
      {edited("flag", [](FlJobSpec& s) { s.robust.rank = 6; }),
       "spec.aggregation.robust.rank: must be between 1 and the round's updates, and a round "
       "commits with 5 update(s) (spec.clients.quorum, else spec.clients.expected)"},
  };
  for (const auto& [spec, message] : kRefused) EXPECT_EQ(fl_->DeployJob(spec).message(), message);
  EXPECT_TRUE(fl_->ListJobs().empty());
  // A deployed robust job cannot be re-deployed without its rule (its rounds hold no sums).
  Deploy(Spec("median"));
  EXPECT_EQ(fl_->DeployJob(Spec("none")).message(),
            "spec.aggregation.robust: job 'rb' exists with a robust rule (its rounds are kept "
            "differently); delete it first");
}

// The coordinator stops after three acknowledged updates (its buffers stay in the pool, named
// by the update log); the restarted one takes them back without re-folding, the last two
// arrive, and version 1 is the median of all five: nothing acknowledged was lost or counted
// twice.
TEST_F(RobustCommitTest, RestartMidRoundKeepsTheAcknowledgedUpdates) {
  Deploy(Spec("median"));
  for (int k = 0; k < 3; ++k) Send(k);
  fl_.reset();
  Start();
  ASSERT_TRUE(fl_->Restore().ok());
  ASSERT_TRUE(fl_->Recover([this](const std::string&) -> Result<SharedPool*> {
                   return static_cast<SharedPool*>(pool_.get());
                 })
                  .ok());
  EXPECT_EQ(Status().value("updates_total", 0), 3);
  for (int k = 3; k < kClients; ++k) Send(k);
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  EXPECT_LT(MaxDiff(Committed(1), Median()), 1e-6);
  EXPECT_EQ(Status()["versions"][1].value("updates", 0), kClients);
  EXPECT_EQ(Status().value("updates_total", 0), kClients);
  // Once the checkpoint is written every update buffer goes back to the pool.
  for (int i = 0; i < 250 && !pool_->HeldBy(kCoordinatorSlot).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(pool_->HeldBy(kCoordinatorSlot).empty());
}

}  // namespace
}  // namespace shoal
