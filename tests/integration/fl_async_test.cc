// The asynchronous algorithms end to end through a real shoald: jobs deployed from manifests,
// clients that speak the job protocol over HTTP (FlHttpClient, and the shoal-client binary),
// updates folded by real leaf instances. FedBuff: a version every K updates, the staleness
// weight applied to a late update, checked against the formula, then a whole run to an accuracy
// bound. FedCompass: clients of different speeds are handed different numbers of local steps,
// train exactly those, and the scheduler's speed estimates match the clients' real speeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
#include <thread>

#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoal/tools/flsim/mlp_trainer.h"
#include "tests/support/shoald_data_test.h"
#include "tests/support/update_for_test.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// sklearn's digits (8x8 images, 1437 train / 360 test) and an MLP 64-64-10: a whole job trains
// in seconds on two cores. The bound every job here must reach on the test split is the one
// the FedAvg digits job holds (fl_test.cc): 90%.
constexpr uint32_t kHidden = 64;
constexpr double kAccuracyBound = 0.90;
const client::MlpShape kShape{64, static_cast<int>(kHidden), 10};
model::ModelSpec DigitsSpec() { return model::MlpSpec(64, {kHidden}, 10); }

std::string Manifest(const std::string& name, const std::string& algorithm, uint32_t rounds,
                     uint32_t local_steps) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm: " + algorithm +
         "\n  model: {architecture: mlp, hidden: " + std::to_string(kHidden) +
         ", seed: 1}\n  data: {dataset: digits}\n" +
         "  clients: {expected: 4}\n  stop: {rounds: " + std::to_string(rounds) + "}\n" +
         "  training: {localSteps: " + std::to_string(local_steps) +
         ", learningRate: 0.1, batchSize: 32}\n  aggregation: {maxFanIn: 2, maxLeaves: 2}\n";
}

std::vector<float> ParseModel(const std::string& bytes) {
  auto m = model::ModelFromSafetensors(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      DigitsSpec());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? m->values : std::vector<float>{};
}

double MaxDiff(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty()) return 1e9;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

// Client k's share of the train split: every 4th sample.
std::vector<uint32_t> Shard(const client::Dataset& train, int k) {
  std::vector<uint32_t> s;
  for (uint32_t i = static_cast<uint32_t>(k); i < train.num_samples; i += 4) s.push_back(i);
  return s;
}

class FlAsyncTest : public ShoaldDataTest {
 protected:
  FlAsyncTest() : ShoaldDataTest(TestData::kDigits, /*check_hugepages=*/false) {}

  std::string Server() const { return ServerOf(shoald_); }
  // Deploys job `name` (Manifest's) and mints an fl-client token of it into `*token`.
  void DeployJob(const std::string& name, const std::string& algorithm, uint32_t rounds,
                 uint32_t steps, std::string* token) {
    DeployFlJob(Manifest(name, algorithm, rounds, steps), name, token);
  }
  Json JobStatus(const std::string& job) {
    return Json::parse(shoald_.Api("GET", "/v1/jobs/" + job).body, nullptr, false);
  }
  bool WaitVersion(const std::string& job, uint64_t v, int timeout_ms = 10000) {
    for (int i = 0; i < timeout_ms / 20; ++i) {
      if (JobStatus(job).value("version", uint64_t{0}) >= v) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // `params` trained `steps` local steps on shard k; returns the SHU1 update body.
  std::string Update(const std::string& job, const JoinResult& c, int k, uint64_t base,
                     uint32_t steps, std::vector<float>& params, uint64_t seed) {
    client::MlpTrainer trainer(kShape, client::SgdOptions{}, seed);
    const std::vector<uint32_t> shard = Shard(data_.train, k);
    EXPECT_TRUE(trainer.Train(params, data_.train, shard, static_cast<int>(steps)).ok());
    return UpdateBody(DigitsSpec(), params, job, c.client_id, c.token, base, shard.size(), steps);
  }
  double TestAccuracy(const std::vector<float>& params) {
    auto eval = client::Evaluate(kShape, params, data_.test);
    EXPECT_TRUE(eval.ok());
    return eval.ok() ? eval->accuracy : 0.0;
  }
};

// FedBuff (K = 3, η_g = 1, s(τ) = (1 + τ)^-½): w ← w + η_g/K · Σ s(τ_k) (x_k − w_{base_k}).
// Step by step first: the version waits for the K-th update; a client's task moves to the new
// version; an update trained from the old version is still taken, weighted by s(1). Then
// shoal-client runs four clients of different speeds to the job's last round: every version
// holds exactly K updates, the clients' and the server's counts agree, and the model reaches
// the accuracy bound.
TEST_F(FlAsyncTest, FedBuffCommitsEveryKUpdatesWithStalenessWeightsAndLearns) {
  constexpr uint32_t kK = 3;
  constexpr uint32_t kRounds = 24;
  constexpr uint32_t kSteps = 40;
  std::string token;
  ASSERT_NO_FATAL_FAILURE(DeployJob("buff", "{name: fedbuff, params: {k: 3, eta: 1.0, a: 0.5}}",
                                    kRounds, kSteps, &token));
  client::FlHttpClient http(Server(), "buff", token);
  std::vector<JoinResult> c;
  for (int k = 0; k < 3; ++k) {
    auto j = http.Join("step-" + std::to_string(k), "");
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    c.push_back(*j);
  }
  auto model = [&](uint64_t v) {
    auto m = http.Model(v);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? ParseModel(m->bytes) : std::vector<float>{};
  };
  auto task = [&](int k) {
    auto t = http.Task(c[k].client_id, c[k].token);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : TaskResult{};
  };
  const std::vector<float> w0 = model(0);
  ASSERT_FALSE(w0.empty());

  // Version 1: three updates from w0, each weighted s(0) = 1.
  std::vector<double> v1_expected(w0.begin(), w0.end());
  for (int k = 0; k < 3; ++k) {
    const TaskResult t = task(k);
    ASSERT_EQ(t.kind, TaskResult::Kind::kTrain);
    EXPECT_EQ(t.model_version, 0u);
    EXPECT_EQ(t.local_steps, kSteps);
    std::vector<float> x = w0;
    ASSERT_TRUE(http.PostUpdate(Update("buff", c[k], k, 0, kSteps, x, 10 + k)).ok());
    for (size_t i = 0; i < x.size(); ++i) v1_expected[i] += (double(x[i]) - w0[i]) / kK;
    if (k + 1 < static_cast<int>(kK)) {
      // Fewer than K in the buffer: no version, and the client is not made to wait (async).
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(JobStatus("buff").value("version", -1), 0);
      EXPECT_EQ(task(k).kind, TaskResult::Kind::kTrain);
    }
  }
  ASSERT_TRUE(WaitVersion("buff", 1)) << JobStatus("buff").dump();
  const std::vector<float> w1 = model(1);
  EXPECT_LT(MaxDiff(w1, v1_expected), 1e-5);
  EXPECT_EQ(JobStatus("buff")["versions"][1].value("updates", 0), int(kK));
  // The clients' next tasks start from version 1.
  EXPECT_EQ(task(1).model_version, 1u);

  // Version 2: client 0's update trained from w0 arrives after version 1 (staleness 1, weight
  // 2^-½); clients 1 and 2 trained from w1.
  const double s1 = 1.0 / std::sqrt(2.0);
  std::vector<double> v2_expected(w1.begin(), w1.end());
  for (int k = 0; k < 3; ++k) {
    const std::vector<float>& base = k == 0 ? w0 : w1;
    std::vector<float> x = base;
    const Status st = http.PostUpdate(Update("buff", c[k], k, k == 0 ? 0 : 1, kSteps, x, 20 + k));
    ASSERT_TRUE(st.ok()) << st.ToString();
    const double s = k == 0 ? s1 : 1.0;
    for (size_t i = 0; i < x.size(); ++i) v2_expected[i] += s * (double(x[i]) - base[i]) / kK;
  }
  ASSERT_TRUE(WaitVersion("buff", 2)) << JobStatus("buff").dump();
  EXPECT_LT(MaxDiff(model(2), v2_expected), 1e-5);
  // Each client's staleness in the status: the versions committed since its latest accepted
  // update's base (version 2 now), and how stale it was on arrival: client 0's update from
  // version 0 arrived at version 1; clients 1 and 2 sent theirs from version 1 at version 1.
  {
    const Json st = JobStatus("buff");
    ASSERT_EQ(st.value("version", 0u), 2u) << st.dump();
    ASSERT_TRUE(st["clients"]["list"].is_array()) << st.dump();
    ASSERT_EQ(st["clients"]["list"].size(), 3u) << st.dump();
    EXPECT_FALSE(st.contains("compass"));
    for (int k = 0; k < 3; ++k) {
      const Json& l = st["clients"]["list"];
      const auto e = std::find_if(
          l.begin(), l.end(), [&](const Json& j) { return j.value("id", "") == c[k].client_id; });
      ASSERT_NE(e, l.end()) << c[k].client_id;
      const uint64_t base = k == 0 ? 0 : 1;
      EXPECT_EQ(e->value("updates", 0u), 2u) << e->dump();
      EXPECT_EQ(e->value("base_version", uint64_t{99}), base) << e->dump();
      EXPECT_EQ(e->value("staleness", uint64_t{99}), 2 - base) << e->dump();
      EXPECT_EQ(e->value("staleness_at_arrival", uint64_t{99}), 1 - base) << e->dump();
      EXPECT_EQ(e->value("max_staleness", uint64_t{99}), 1 - base) << e->dump();
      EXPECT_EQ(e->value("last_update_steps", 0u), kSteps) << e->dump();
      EXPECT_FALSE(e->contains("group")) << e->dump();
    }
  }

  // The rest of the job: shoal-client's four clients (lognormal speeds) to the last round.
  int rc = -1;
  const std::string out = RunShoalClient(Server(), token,
                                         "--job buff --data digits --clients 4 --partition iid "
                                         "--seed 5 --speeds lognormal:0.5,0.002 --time-scale 1 "
                                         "--max-seconds 40",
                                         &rc);
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex(R"(job done after [0-9.]+ s: (\d+) updates accepted)")))
      << out;
  const uint64_t accepted = std::stoull(m[1]);

  const Json st = JobStatus("buff");
  ASSERT_EQ(st.value("state", ""), "done") << out;
  ASSERT_EQ(st.value("version", 0u), kRounds);
  for (uint32_t v = 1; v <= kRounds; ++v) {
    EXPECT_EQ(st["versions"][v].value("updates", 0u), kK) << "version " << v;
  }
  // Every update a client was told was accepted is counted once: the six above and
  // shoal-client's. The ones past the last version's K sit in a buffer that never fills.
  const uint64_t total = st.value("updates_total", uint64_t{0});
  EXPECT_EQ(total, 6 + accepted) << out;
  EXPECT_GE(total, uint64_t{kK} * kRounds);
  EXPECT_LT(total, uint64_t{kK} * kRounds + kK);
  const double accuracy = TestAccuracy(model(kRounds));
  EXPECT_GE(accuracy, kAccuracyBound) << out;
  std::cerr << "fedbuff: version " << kRounds << " from " << total << " updates, test accuracy "
            << accuracy << " (initial " << TestAccuracy(w0) << ")\n";
}

// One simulated client of the FedCompass job: it asks for tasks, trains exactly the local
// steps it is assigned, takes `step_seconds` per step (sleeping the rest after computing) and
// uploads; it keeps what it was told.
struct CompassClient {
  int k = 0;
  double step_seconds = 0;
  JoinResult id;
  std::vector<TaskResult> tasks;     // the train tasks it ran, in order
  uint32_t last_admitted_steps = 0;  // local steps of its last update the server took
  uint64_t accepted = 0;
  std::string error;
};

// FedCompass (Q_max = 20, Q_min = 4, λ = 1.5): two fast clients (10 ms per step) and two slow
// ones (40 ms). The scheduler must give the slow clients fewer steps than the fast ones so that
// they arrive with them; the clients train what they were given, and the server's speed estimate
// of each client (time from assignment to arrival over the steps assigned) is at least its real
// step time: it could not be lower unless a client ran fewer steps than assigned.
TEST_F(FlAsyncTest, FedCompassAssignsStepsBySpeedAndClientsRunThem) {
  constexpr uint32_t kQMax = 20, kQMin = 4;
  constexpr uint32_t kRounds = 40;
  std::string token;
  ASSERT_NO_FATAL_FAILURE(DeployJob(
      "compass", "{name: fedcompass, params: {q_min: 4, lambda: 1.5}}", kRounds, kQMax, &token));
  std::vector<CompassClient> clients(4);
  for (int k = 0; k < 4; ++k) {
    clients[k].k = k;
    clients[k].step_seconds = k < 2 ? 0.010 : 0.040;
  }
  std::mutex models_mu;
  std::map<uint64_t, std::vector<float>> models;
  const auto deadline = Clock::now() + std::chrono::seconds(45);

  auto run = [&](CompassClient& me) {
    client::FlHttpClient http(Server(), "compass", token);
    auto joined = http.Join("compass-" + std::to_string(me.k), "");
    if (!joined.ok()) {
      me.error = "join: " + joined.status().ToString();
      return;
    }
    me.id = *joined;
    client::MlpTrainer trainer(kShape, client::SgdOptions{}, 100 + me.k);
    const std::vector<uint32_t> shard = Shard(data_.train, me.k);
    while (Clock::now() < deadline) {
      auto t = http.Task(me.id.client_id, me.id.token);
      if (!t.ok()) {
        if (!client::IsRetryable(t.status())) {
          me.error = "task: " + t.status().ToString();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (t->kind == TaskResult::Kind::kDone) return;
      if (t->kind == TaskResult::Kind::kWait) {
        // Poll often: the scheduler times the client from its assignment, not from this fetch.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      std::vector<float> params;
      {
        std::lock_guard lock(models_mu);
        auto it = models.find(t->model_version);
        if (it != models.end()) params = it->second;
      }
      if (params.empty()) {
        auto m = http.Model(t->model_version);
        if (!m.ok()) {
          me.error = "model: " + m.status().ToString();
          return;
        }
        params = ParseModel(m->bytes);
        std::lock_guard lock(models_mu);
        models[t->model_version] = params;
      }
      const auto start = Clock::now();
      if (!trainer.Train(params, data_.train, shard, static_cast<int>(t->local_steps)).ok()) {
        me.error = "train failed";
        return;
      }
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(t->local_steps * me.step_seconds)));
      me.tasks.push_back(*t);
      model::Model m(DigitsSpec());
      m.values = params;
      model::UpdateMeta meta;
      meta.job = "compass";
      meta.client_id = me.id.client_id;
      meta.token = me.id.token;
      meta.base_version = t->model_version;
      meta.num_samples = shard.size();
      meta.local_steps = t->local_steps;
      meta.train_seconds = t->local_steps * me.step_seconds;
      auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
      if (!body.ok()) {
        me.error = "encode: " + body.status().ToString();
        return;
      }
      for (;;) {
        const Status st = http.PostUpdate(
            std::string_view(reinterpret_cast<const char*>(body->data()), body->size()));
        if (st.ok()) {
          ++me.accepted;
          me.last_admitted_steps = t->local_steps;
          break;
        }
        if (st.code() == StatusCode::kAlreadyExists) break;  // the job is done, or too stale
        if (!client::IsRetryable(st) || Clock::now() >= deadline) {
          me.error = "update: " + st.ToString();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    me.error = "the job did not finish in time";
  };
  // While the clients train, the status names each client's arrival group: clients the
  // scheduler put in one group carry the same id and that group's times, and some snapshot
  // shows a group of more than one client.
  std::atomic<bool> running = true;
  std::vector<std::string> group_errors;
  size_t shared_groups_seen = 0, snapshots = 0;
  std::thread watcher([&] {
    while (running) {
      const Json st = JobStatus("compass");
      if (st.contains("compass")) {
        ++snapshots;
        std::map<uint64_t, std::vector<Json>> by_group;
        for (const Json& e : st["compass"]["clients"]) {
          if (e["group"].is_object())
            by_group[e["group"].value("id", uint64_t{0})].push_back(e["group"]);
        }
        for (const auto& [id, gs] : by_group) {
          if (gs.size() > 1 && gs[0].value("open", false)) ++shared_groups_seen;
          for (const Json& g : gs) {
            if (g["open"] != gs[0]["open"] ||
                g["expected_arrival_s"] != gs[0]["expected_arrival_s"] ||
                g["latest_arrival_s"] != gs[0]["latest_arrival_s"]) {
              group_errors.push_back(st["compass"].dump());
            }
            if (g.value("open", false) &&
                !(g["expected_arrival_s"].get<double>() <= g["latest_arrival_s"].get<double>())) {
              group_errors.push_back(st["compass"].dump());
            }
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  });
  std::vector<std::thread> threads;
  for (auto& c : clients) threads.emplace_back(run, std::ref(c));
  for (auto& t : threads) t.join();
  running = false;
  watcher.join();
  EXPECT_TRUE(group_errors.empty()) << group_errors.size() << " inconsistent snapshots, first "
                                    << (group_errors.empty() ? "" : group_errors[0]);
  EXPECT_GT(shared_groups_seen, 0u)
      << "no group of two or more clients in " << snapshots << " snapshots";

  const Json st = JobStatus("compass");
  for (const auto& c : clients) ASSERT_EQ(c.error, "") << "client " << c.k << "\n" << st.dump();
  ASSERT_EQ(st.value("state", ""), "done") << st.dump();
  ASSERT_EQ(st.value("version", 0u), kRounds);

  // What the clients were told: Q_max first (everyone starts from the initial model), then
  // assignments within [Q_min, Q_max], fewer steps for the slow clients.
  std::map<int, double> mean_steps;
  for (const auto& c : clients) {
    ASSERT_GE(c.tasks.size(), 2u) << "client " << c.k;
    EXPECT_EQ(c.tasks[0].local_steps, kQMax) << "client " << c.k;
    double sum = 0;
    std::string seen;
    for (size_t i = 1; i < c.tasks.size(); ++i) {
      EXPECT_GE(c.tasks[i].local_steps, kQMin) << "client " << c.k << " task " << i;
      EXPECT_LE(c.tasks[i].local_steps, kQMax) << "client " << c.k << " task " << i;
      sum += c.tasks[i].local_steps;
      seen += " " + std::to_string(c.tasks[i].local_steps);
    }
    mean_steps[c.k] = sum / double(c.tasks.size() - 1);
    std::cerr << "fedcompass: client " << c.k << " (" << c.step_seconds * 1e3 << " ms/step) ran "
              << c.tasks.size() << " tasks, steps after the first:" << seen << "\n";
  }
  for (int fast : {0, 1}) {
    for (int slow : {2, 3}) {
      EXPECT_LT(mean_steps[slow] * 1.5, mean_steps[fast])
          << "slow client " << slow << " vs fast client " << fast;
    }
  }

  // What the server made of them: per client, the steps its last update declared are the steps
  // it last trained, and the speed estimate lies between its real step time (nothing arrives
  // sooner than steps x step time after the assignment) and 1.5 times that.
  ASSERT_TRUE(st.contains("compass")) << st.dump();
  const Json& sc = st["compass"]["clients"];
  ASSERT_EQ(sc.size(), 4u) << st.dump();
  std::map<int, double> speed;
  for (const auto& c : clients) {
    const auto it = std::find_if(
        sc.begin(), sc.end(), [&](const Json& j) { return j.value("id", "") == c.id.client_id; });
    ASSERT_NE(it, sc.end()) << c.id.client_id;
    EXPECT_EQ(it->value("last_update_steps", 0u), c.last_admitted_steps) << "client " << c.k;
    EXPECT_EQ(it->value("updates", uint64_t{0}), c.accepted) << "client " << c.k;
    // Its latest update was trained from a version at most the current one; FedCompass groups
    // arrive together, so a client lags by at most a few versions on arrival.
    ASSERT_TRUE((*it)["staleness"].is_number()) << it->dump();
    EXPECT_EQ(it->value("staleness", uint64_t{0}), kRounds - it->value("base_version", uint64_t{0}))
        << it->dump();
    EXPECT_LE(it->value("staleness_at_arrival", uint64_t{0}),
              it->value("max_staleness", uint64_t{0}))
        << it->dump();
    ASSERT_TRUE((*it)["group"].is_object()) << it->dump();
    ASSERT_TRUE((*it)["speed_s_per_step"].is_number()) << it->dump();
    speed[c.k] = (*it)["speed_s_per_step"].get<double>();
    EXPECT_GE(speed[c.k], c.step_seconds * 0.999) << "client " << c.k;
    EXPECT_LE(speed[c.k], c.step_seconds * 1.5) << "client " << c.k;
  }
  // Groups: at least one version aggregates more than one client's update (fast and slow
  // arriving together), which is what the assignments are for.
  uint32_t max_updates = 0;
  for (const auto& v : st["versions"]) max_updates = std::max(max_updates, v.value("updates", 0u));
  EXPECT_GE(max_updates, 3u) << st.dump();

  const double accuracy = TestAccuracy(ParseModel(
      shoald_.Api("GET", "/v1/jobs/compass/model?version=" + std::to_string(kRounds)).body));
  EXPECT_GE(accuracy, kAccuracyBound);
  std::cerr << "fedcompass: version " << kRounds << " from " << st.value("updates_total", 0)
            << " updates, test accuracy " << accuracy << "; speed estimates (ms/step)";
  for (const auto& [k, s] : speed) std::cerr << " " << k << ":" << s * 1e3;
  std::cerr << "\n";
}

}  // namespace
}  // namespace shoal::testing
