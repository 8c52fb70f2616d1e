// FL end to end through a real shoald: clients join over HTTP, train on Fashion-MNIST, push
// SHU1 updates that land in the job's pool and are folded by real leaf-aggregator instances;
// the coordinator commits versions that clients download as safetensors.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <thread>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/serving/executor/executor.h"
#include "shoal/serving/onnx/onnx.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoal/tools/flsim/mlp_trainer.h"
#include "tests/support/shoald_data_test.h"
#include "tests/support/update_for_test.h"
#include "tests/support/wait_for.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
constexpr uint32_t kHidden = 32;

std::string Manifest(const std::string& name, const std::string& algorithm, uint32_t clients,
                     uint32_t rounds, const std::string& extra = {},
                     const std::string& clients_extra = {}) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm: {name: " + algorithm +
         "}\n  model: {architecture: mlp, hidden: " + std::to_string(kHidden) +
         "}\n  clients: {expected: " + std::to_string(clients) + clients_extra + "}\n" + extra +
         "  stop: {rounds: " + std::to_string(rounds) +
         "}\n  training: {localSteps: 150, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 2, maxLeaves: 2}\n";
}

struct Client {
  std::string id, token;
};

class FlJobTest : public ShoaldDataTest {
 protected:
  FlJobTest() : ShoaldDataTest(TestData::kFashionMnist) {}

  Client Join(const std::string& job, const std::string& name) {
    auto r = shoald_.Api("POST", "/v1/jobs/" + job + "/join", "{\"name\":\"" + name + "\"}",
                         {"Content-Type: application/json"});
    EXPECT_EQ(r.status, 200) << r.body;
    auto j = Json::parse(r.body, nullptr, false);
    return {j.value("client_id", ""), j.value("token", "")};
  }
  Json Status(const std::string& job) {
    return Json::parse(shoald_.Api("GET", "/v1/jobs/" + job).body, nullptr, false);
  }
  std::vector<float> Download(const std::string& job, uint64_t version) {
    return ModelOf(job, version, model::MlpSpec(784, {kHidden}, 10));
  }
  // Trains `steps` on shard k from `params`; returns the update body.
  std::string Train(const std::string& job, const Client& c, int k, uint64_t base,
                    std::vector<float>& params, uint64_t* samples) {
    client::MlpShape shape{784, kHidden, 10};
    client::SgdOptions sgd;
    client::MlpTrainer trainer(shape, sgd, 7 + k);
    std::vector<uint32_t> shard;
    for (uint32_t i = 0; i < 1500; ++i) shard.push_back(k * 1500 + i);
    EXPECT_TRUE(trainer.Train(params, data_.train, shard, 150).ok());
    *samples = shard.size();
    return UpdateBody(model::MlpSpec(784, {kHidden}, 10), params, job, c.id, c.token, base,
                      *samples, 150);
  }
  // Each client k trains from `base` (version `v`) on shard k and pushes its update: each is
  // acknowledged (202).
  void PushRound(const std::string& job, const std::vector<Client>& clients, uint64_t v,
                 const std::vector<float>& base) {
    for (size_t k = 0; k < clients.size(); ++k) {
      std::vector<float> params = base;
      uint64_t n = 0;
      ASSERT_EQ(Push(job, Train(job, clients[k], static_cast<int>(k), v, params, &n)).status, 202);
    }
  }
  HttpResult Push(const std::string& job, const std::string& body) {
    HttpResult r;
    for (int attempt = 0; attempt < 50; ++attempt) {
      // Updates go to the public gateway (the pool), with a bearer token.
      r = Http(shoald_.port(), "POST", "/v1/jobs/" + job + "/updates", body,
               {"Content-Type: application/octet-stream", shoald_.AuthHeader()});
      if (r.status != 502 && r.status != 503 && r.status != 404) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return r;
  }
  bool WaitVersion(const std::string& job, uint64_t v) {
    for (int i = 0; i < 300; ++i) {
      if (Status(job).value("version", uint64_t{0}) >= v) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::vector<Client> JoinAll(const std::string& job, int n) {
    std::vector<Client> clients;
    for (int k = 0; k < n; ++k) {
      std::string name = "client-";
      name += std::to_string(k);
      clients.push_back(Join(job, name));
    }
    return clients;
  }
  // Client c's next task in `job`.
  Json Task(const std::string& job, const Client& c) {
    auto r = shoald_.Api("GET", "/v1/jobs/" + job + "/task?client=" + c.id + "&token=" + c.token);
    return Json::parse(r.body, nullptr, false);
  }
  std::string TaskKind(const std::string& job, const Client& c) {
    return Task(job, c).value("kind", "");
  }
  // The job's buffers go back to the pool once the checkpoint of its last version is written.
  bool PoolDrains() {
    for (int i = 0; i < 250; ++i) {
      if (shoald_.Metric("shoal_pool_bytes", "state=\"used\"") == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  static double MaxDiff(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return a.size() == b.size() && !a.empty() ? m : 1e9;
  }
  // kill -9 shoald, wait for its leaf instances to go (they get SIGTERM when it dies), start
  // it again on the same state directory.
  void KillAndRestart(const std::string& job) {
    shoald_.Stop(SIGKILL);
    for (int i = 0; i < 200 && !LeafPids(job).empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(shoald_.Start()) << shoald_.Log();
  }
  std::vector<int> LeafPids(const std::string& job) {
    std::vector<int> pids;
    DIR* d = opendir("/proc");
    while (dirent* e = readdir(d)) {
      const int pid = atoi(e->d_name);
      if (pid <= 0) continue;
      std::ifstream env("/proc/" + std::string(e->d_name) + "/environ", std::ios::binary);
      std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
      if (all.find(std::string("SHOAL_FUNCTION=fl.") + job + '\0') != std::string::npos &&
          all.find("SHOAL_NODE=" + shoald_.node() + '\0') != std::string::npos) {
        pids.push_back(pid);
      }
    }
    closedir(d);
    return pids;
  }
};

TEST_F(FlJobTest, FedAvgRoundsThroughLeafInstancesEqualTheFlatAverageAndLearn) {
  auto d = shoald_.Deploy(Manifest("fmnist", "fedavg", 4, 4));
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  std::vector<Client> clients;
  for (int k = 0; k < 4; ++k) clients.push_back(Join("fmnist", "client-" + std::to_string(k)));
  ASSERT_FALSE(clients[3].token.empty());

  for (uint64_t round = 0; round < 4; ++round) {
    const std::vector<float> global = Download("fmnist", round);
    ASSERT_FALSE(global.empty());
    std::vector<double> expected(global.size(), 0.0);
    double total = 0;
    for (int k = 0; k < 4; ++k) {
      auto task = Task("fmnist", clients[k]);
      ASSERT_EQ(task.value("kind", ""), "train") << task.dump();
      ASSERT_EQ(task.value("model_version", uint64_t{99}), round);
      std::vector<float> params = global;
      uint64_t n = 0;
      const std::string body = Train("fmnist", clients[k], k, round, params, &n);
      for (size_t i = 0; i < params.size(); ++i) expected[i] += double(n) * params[i];
      total += double(n);
      auto r = Push("fmnist", body);
      ASSERT_EQ(r.status, 202) << r.body;
      if (k < 3) {
        // Its update is in: until the round commits, the client waits.
        auto wait = Task("fmnist", clients[k]);
        EXPECT_EQ(wait.value("kind", ""), "wait") << wait.dump();
        auto again = Push("fmnist", body);
        EXPECT_EQ(again.status, 409) << again.body;
        EXPECT_NE(again.body.find("already sent an update for this round"), std::string::npos);
      }
    }
    ASSERT_TRUE(WaitVersion("fmnist", round + 1)) << Status("fmnist").dump();
    if (round == 0) {
      // The hierarchy (two leaves' partial sums added at the top) equals the flat average.
      const std::vector<float> v1 = Download("fmnist", 1);
      double max_diff = 0;
      for (size_t i = 0; i < v1.size(); ++i) {
        max_diff = std::max(max_diff, std::abs(v1[i] - expected[i] / total));
      }
      EXPECT_LT(max_diff, 1e-5);
    }
  }
  const std::vector<float> final_model = Download("fmnist", 4);
  auto eval = client::Evaluate({784, kHidden, 10}, final_model, data_.test);
  ASSERT_TRUE(eval.ok());
  EXPECT_GE(eval->accuracy, 0.75);
  auto post = shoald_.Api("POST", "/v1/jobs/fmnist/eval",
                          Json{{"client_id", clients[0].id},
                               {"token", clients[0].token},
                               {"version", 4},
                               {"accuracy", eval->accuracy},
                               {"loss", eval->loss},
                               {"samples", 10000}}
                              .dump(),
                          {"Content-Type: application/json"});
  EXPECT_EQ(post.status, 200) << post.body;
  Json st = Status("fmnist");
  EXPECT_EQ(st.value("state", ""), "done");
  EXPECT_EQ(st.value("updates_total", 0), 16);
  EXPECT_NEAR(st["versions"][4].value("accuracy", 0.0), eval->accuracy, 1e-9);
  EXPECT_EQ(st["versions"][4].value("updates", 0), 4);
  // The leaves are forked from the job's zygote (the fold threads start in the instance, after
  // the fork): none of them took the full spawn path.
  EXPECT_GE(shoald_.Metric("shoal_instance_starts_total", "function=\"fl.fmnist\",path=\"zygote\""),
            1)
      << shoald_.Log();
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"fl.fmnist\",path=\"spawn\""),
            0)
      << shoald_.Log();
  // The trained model leaves as ONNX (`shoal fl model --format onnx`) and classifies the test
  // split on the CPU executor as the trainer's own evaluation did.
  const std::string onnx_path = shoald_.state_dir() + "/fmnist.onnx";
  auto cli = shoald_.Cli({"fl", "model", "fmnist", "--format", "onnx", "-o", onnx_path});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  auto graph = inference::LoadOnnx(onnx_path);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  auto exe = (*inference::CreateExecutor("cpu"))->Compile(*graph, {.max_batch = 1000});
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  std::vector<float> logits(1000 * 10);
  size_t correct = 0;
  for (size_t b = 0; b < data_.test.num_samples; b += 1000) {
    const size_t n = std::min<size_t>(1000, data_.test.num_samples - b);
    ASSERT_TRUE((*exe)
                    ->Run({std::span<const float>(data_.test.Row(b), n * 784),
                           std::span<float>(logits).first(n * 10), static_cast<int64_t>(n)})
                    .ok());
    for (size_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * 10;
      correct +=
          static_cast<size_t>(std::max_element(row, row + 10) - row) == data_.test.labels[b + i];
    }
  }
  EXPECT_NEAR(double(correct) / double(data_.test.num_samples), eval->accuracy, 2e-3);
  auto done = Json::parse(
      shoald_
          .Api("GET", "/v1/jobs/fmnist/task?client=" + clients[1].id + "&token=" + clients[1].token)
          .body,
      nullptr, false);
  EXPECT_EQ(done.value("kind", ""), "done");
  // The pool holds nothing for the job any more (once the last checkpoint is written).
  EXPECT_TRUE(PoolDrains()) << shoald_.Metric("shoal_pool_bytes", "state=\"used\"");
}

TEST_F(FlJobTest, BadUpdatesGetClearErrorsAndAreCountedNowhere) {
  ASSERT_EQ(shoald_.Deploy(Manifest("strict", "fedavg", 2, 1)).exit_code, 0);
  Client c = Join("strict", "a");
  std::vector<float> params = Download("strict", 0);
  uint64_t n = 0;
  std::string body = Train("strict", c, 0, 0, params, &n);
  std::string bad_token = body;
  const auto pos = bad_token.find(c.token);
  ASSERT_NE(pos, std::string::npos);
  bad_token[pos] = bad_token[pos] == 'a' ? 'b' : 'a';
  auto r1 = Push("strict", bad_token);
  EXPECT_EQ(r1.status, 403);
  EXPECT_EQ(r1.body, "{\"error\":\"bad token for client '" + c.id + "'\"}\n");
  auto r2 = Push("strict", "definitely not an update");
  EXPECT_EQ(r2.status, 400);
  EXPECT_NE(r2.body.find("SHU1"), std::string::npos) << r2.body;
  // A tensor table that does not match the model: refused by the leaf, which names the tensor.
  model::Model wrong(model::MlpSpec(784, {kHidden + 1}, 10));
  model::UpdateMeta meta;
  meta.job = "strict";
  meta.client_id = c.id;
  meta.token = c.token;
  meta.num_samples = 10;
  auto wb = model::EncodeUpdate(meta, wrong, model::DType::kF32);
  ASSERT_TRUE(wb.ok());
  auto r3 = Push("strict", std::string(reinterpret_cast<const char*>(wb->data()), wb->size()));
  EXPECT_EQ(r3.status, 400);
  EXPECT_NE(r3.body.find("tensor 'fc1.weight': shape [32,784] expected, got [33,784]"),
            std::string::npos)
      << r3.body;
  auto r4 = Http(shoald_.port(), "POST", "/v1/jobs/nojob/updates", body, {shoald_.AuthHeader()});
  EXPECT_EQ(r4.status, 404);
  EXPECT_EQ(r4.body, "{\"error\":\"FL job 'nojob' not found\"}\n");
  Json st = Status("strict");
  EXPECT_EQ(st.value("updates_total", -1), 0);
  EXPECT_EQ(st.value("version", -1), 0);
  // The good update still goes in after all that.
  auto ok = Push("strict", body);
  EXPECT_EQ(ok.status, 202) << ok.body;
  EXPECT_EQ(Status("strict").value("updates_total", -1), 1);
}

// The CPU leaf checks and folds an update in one pass, block by block: an update with a NaN in
// its very last value is refused (400, the value named, as before) after its earlier blocks went
// into the leaf's partial sum. Its reply says so, and the coordinator rebuilds that sum from
// the acknowledged updates at commit: the version committed is bit for bit the one a second job
// commits from the same good updates alone, and the job's status counts the rebuild.
TEST_F(FlJobTest, ARefusedUpdateFoldedInPartIsRebuiltAtCommit) {
  // One leaf on the CPU: every update of a job folds into one partial sum, in arrival order.
  const auto manifest = [](const std::string& name) {
    std::string m = Manifest(name, "fedavg", 3, 1);
    const std::string agg = "aggregation: {maxFanIn: 2, maxLeaves: 2}";
    m.replace(m.find(agg), agg.size(), "aggregation: {maxFanIn: 4, maxLeaves: 1, device: cpu}");
    return m;
  };
  ASSERT_EQ(shoald_.Deploy(manifest("refused")).exit_code, 0);
  ASSERT_EQ(shoald_.Deploy(manifest("clean")).exit_code, 0);
  const std::vector<Client> a = JoinAll("refused", 3), b = JoinAll("clean", 3);
  const model::ModelSpec spec = model::MlpSpec(784, {kHidden}, 10);
  const std::vector<float> global = Download("refused", 0);
  ASSERT_EQ(global, Download("clean", 0));
  std::vector<std::vector<float>> trained(3, global);
  for (size_t k = 0; k < 3; ++k) {
    for (size_t i = 0; i < global.size(); ++i) trained[k][i] += float((i * 7 + k) % 13) / 64.0f;
  }
  const auto body = [&](const std::string& job, const Client& c, size_t k) {
    return UpdateBody(spec, trained[k], job, c.id, c.token, 0, 100 + 10 * k, 150);
  };
  ASSERT_EQ(Push("refused", body("refused", a[0], 0)).status, 202);
  std::vector<float> poisoned = trained[1];
  poisoned.back() = std::numeric_limits<float>::quiet_NaN();
  const HttpResult refused =
      Push("refused", UpdateBody(spec, poisoned, "refused", a[1].id, a[1].token, 0, 110, 150));
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.body,
            "{\"error\":\"tensor 'fc2.bias': 1 non-finite values (first at index 9)\"}\n");
  ASSERT_EQ(Push("refused", body("refused", a[1], 1)).status, 202);
  ASSERT_EQ(Push("refused", body("refused", a[2], 2)).status, 202);
  for (size_t k = 0; k < 3; ++k) ASSERT_EQ(Push("clean", body("clean", b[k], k)).status, 202);
  ASSERT_TRUE(WaitVersion("refused", 1)) << Status("refused").dump();
  ASSERT_TRUE(WaitVersion("clean", 1)) << Status("clean").dump();
  const std::vector<float> got = Download("refused", 1), want = Download("clean", 1);
  ASSERT_EQ(got.size(), global.size());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "the refused update left a trace in the committed model";
  ASSERT_NE(got, global);
  const Json st = Status("refused");
  EXPECT_EQ(st.value("updates_total", 0), 3);
  EXPECT_EQ(st.value("partial_rebuilds", -1), 1) << st.dump();
  EXPECT_EQ(Status("clean").value("partial_rebuilds", -1), 0);
  EXPECT_NE(
      shoald_.Log().find("refused an update of client " + a[1].id + " after folding part of it"),
      std::string::npos)
      << shoald_.Log();
  EXPECT_NE(shoald_.Log().find("fl job refused: partial sum rebuilt from 3 acknowledged update(s)"),
            std::string::npos);
}

TEST_F(FlJobTest, KilledLeafMidRoundLosesNoAcknowledgedUpdate) {
  ASSERT_EQ(shoald_.Deploy(Manifest("sturdy", "fedavg", 4, 1)).exit_code, 0);
  std::vector<Client> clients;
  for (int k = 0; k < 4; ++k) clients.push_back(Join("sturdy", "c" + std::to_string(k)));
  const std::vector<float> global = Download("sturdy", 0);
  std::vector<double> expected(global.size(), 0.0);
  double total = 0;
  for (int k = 0; k < 4; ++k) {
    std::vector<float> params = global;
    uint64_t n = 0;
    const std::string body = Train("sturdy", clients[k], k, 0, params, &n);
    for (size_t i = 0; i < params.size(); ++i) expected[i] += double(n) * params[i];
    total += double(n);
    auto r = Push("sturdy", body);
    ASSERT_EQ(r.status, 202) << r.body;
    if (k == 1) {
      // Two updates are folded and acknowledged; the leaves die.
      auto pids = LeafPids("sturdy");
      ASSERT_FALSE(pids.empty());
      for (int pid : pids) kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(WaitVersion("sturdy", 1)) << Status("sturdy").dump();
  const std::vector<float> v1 = Download("sturdy", 1);
  double max_diff = 0;
  for (size_t i = 0; i < v1.size(); ++i)
    max_diff = std::max(max_diff, std::abs(v1[i] - expected[i] / total));
  EXPECT_LT(max_diff, 1e-5) << "every acknowledged update counted exactly once";
  Json st = Status("sturdy");
  EXPECT_EQ(st.value("updates_total", 0), 4);
  EXPECT_EQ(st["versions"][1].value("updates", 0), 4);
}

// kill -9 of shoald with acknowledged updates in an open round: the restarted shoald takes over
// the job's pool, re-folds exactly the logged updates, and the round completes with the flat
// weighted average of every acknowledged update; a second kill after the commit changes nothing.
TEST_F(FlJobTest, KilledShoaldMidRoundLosesNoAcknowledgedUpdateAndCountsNoneTwice) {
  ASSERT_EQ(shoald_.Deploy(Manifest("durable", "fedavg", 4, 1)).exit_code, 0);
  std::vector<Client> clients = JoinAll("durable", 4);
  const std::vector<float> global = Download("durable", 0);
  std::vector<double> expected(global.size(), 0.0);
  double total = 0;
  std::vector<std::string> bodies;
  for (int k = 0; k < 4; ++k) {
    std::vector<float> params = global;
    uint64_t n = 0;
    bodies.push_back(Train("durable", clients[k], k, 0, params, &n));
    for (size_t i = 0; i < params.size(); ++i) expected[i] += double(n) * params[i];
    total += double(n);
  }
  for (double& e : expected) e /= total;
  for (int k = 0; k < 2; ++k) ASSERT_EQ(Push("durable", bodies[k]).status, 202);
  KillAndRestart("durable");
  // Taken over on the backend under test, from where that backend keeps it.
  const std::string pool_dir = TestPoolBackend() == "dpdk" ? "/dev/hugepages/" : "/dev/shm/";
  EXPECT_NE(shoald_.Log().find("pool: recovered " + TestPoolBackend() + " " + pool_dir + "shoal." +
                               shoald_.node() + ".default"),
            std::string::npos);
  EXPECT_NE(shoald_.Log().find("re-folded 2 acknowledged update(s)"), std::string::npos);
  Json st = Status("durable");
  EXPECT_EQ(st.value("version", -1), 0);
  EXPECT_EQ(st.value("updates_total", -1), 2) << st.dump();
  // The two acknowledged updates are still in the round: their clients wait, a resend is a
  // duplicate.
  EXPECT_EQ(TaskKind("durable", clients[0]), "wait");
  EXPECT_EQ(Push("durable", bodies[1]).status, 409);
  for (int k = 2; k < 4; ++k) ASSERT_EQ(Push("durable", bodies[k]).status, 202);
  ASSERT_TRUE(WaitVersion("durable", 1)) << Status("durable").dump();
  EXPECT_LT(MaxDiff(Download("durable", 1), expected), 1e-5);
  st = Status("durable");
  EXPECT_EQ(st.value("updates_total", 0), 4);
  EXPECT_EQ(st["versions"][1].value("updates", 0), 4);
  // After the commit the log holds nothing the checkpoint includes: a second crash re-folds
  // nothing and commits nothing.
  KillAndRestart("durable");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  st = Status("durable");
  EXPECT_EQ(st.value("version", 0), 1);
  EXPECT_EQ(st.value("updates_total", 0), 4);
  EXPECT_LT(MaxDiff(Download("durable", 1), expected), 1e-5);
  EXPECT_TRUE(PoolDrains()) << shoald_.Metric("shoal_pool_bytes", "state=\"used\"");
}

// A version is served as soon as the top holds it; its checkpoint is written behind it. A crash
// in between (held open here by fl_checkpoint_delay_ms) loses nothing: the update log still
// names the version's updates, their buffers are still in the pool, and the restarted shoald
// re-folds them and commits the same model again, counting each update once.
TEST_F(FlJobTest, CrashBetweenCommitAndCheckpointReplaysTheLog) {
  shoald_.Stop();
  Shoald::Options slow;
  slow.extra_yaml = "fl_checkpoint_delay_ms: 600000\n";
  ASSERT_TRUE(shoald_.Start(slow)) << shoald_.Log();
  ASSERT_EQ(shoald_.Deploy(Manifest("behind", "fedavg", 2, 1)).exit_code, 0);
  std::vector<Client> clients = JoinAll("behind", 2);
  ASSERT_NO_FATAL_FAILURE(PushRound("behind", clients, 0, Download("behind", 0)));
  ASSERT_TRUE(WaitVersion("behind", 1)) << Status("behind").dump();
  auto served = shoald_.Api("GET", "/v1/jobs/behind/model?version=1");
  ASSERT_EQ(served.status, 200);
  const std::string dir = shoald_.state_dir() + "/state/jobs/behind";
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  // Served, not yet on disk: the checkpoint still says version 0, the log names both updates
  // (96-byte records) and their buffers are still held.
  EXPECT_EQ(Json::parse(read(dir + "/state.json"), nullptr, false).value("version", -1), 0);
  EXPECT_EQ(read(dir + "/updates.log").size(), 2u * 96u);
  EXPECT_GT(shoald_.Metric("shoal_pool_bytes", "state=\"used\""), 0);

  KillAndRestart("behind");
  EXPECT_NE(shoald_.Log().find("re-folded 2 acknowledged update(s)"), std::string::npos)
      << shoald_.Log();
  ASSERT_TRUE(WaitVersion("behind", 1)) << Status("behind").dump();
  auto again = shoald_.Api("GET", "/v1/jobs/behind/model?version=1");
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.body, served.body);  // the same bytes: the same sum, the same step
  Json st = Status("behind");
  EXPECT_EQ(st.value("updates_total", 0), 2) << st.dump();
  EXPECT_EQ(st["versions"][1].value("updates", 0), 2);
  // Without the delay the checkpoint follows at once: then the log is empty, and the pool too
  // (the job is done: no partial sums are kept warm for a next round).
  bool written = false;
  for (int i = 0; i < 250 && !written; ++i) {
    written = Json::parse(read(dir + "/state.json"), nullptr, false).value("version", -1) == 1 &&
              read(dir + "/updates.log").empty() &&
              shoald_.Metric("shoal_pool_bytes", "state=\"used\"") == 0;
    if (!written) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(written) << read(dir + "/state.json");
  EXPECT_EQ(read(dir + "/model.1.safetensors"), served.body);
}

// FedAvgM's momentum is part of the checkpoint: after a kill -9 between rounds, round 2 still
// applies w2 = avg2 + β (w1 − w0) (η = 1, v1 = Δ1 = w1 − w0).
TEST_F(FlJobTest, FedAvgMMomentumSurvivesARestart) {
  ASSERT_EQ(shoald_.Deploy(Manifest("momentum", "fedavgm", 2, 2)).exit_code, 0);
  std::vector<Client> clients = JoinAll("momentum", 2);
  const std::vector<float> w0 = Download("momentum", 0);
  ASSERT_NO_FATAL_FAILURE(PushRound("momentum", clients, 0, w0));
  ASSERT_TRUE(WaitVersion("momentum", 1));
  const std::vector<float> w1 = Download("momentum", 1);
  KillAndRestart("momentum");
  std::vector<double> expected(w1.size(), 0.0);
  double total = 0;
  for (int k = 0; k < 2; ++k) {
    std::vector<float> params = w1;
    uint64_t n = 0;
    const std::string body = Train("momentum", clients[k], k + 2, 1, params, &n);
    for (size_t i = 0; i < params.size(); ++i) expected[i] += double(n) * params[i];
    total += double(n);
    ASSERT_EQ(Push("momentum", body).status, 202);
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    expected[i] = expected[i] / total + 0.9 * (double(w1[i]) - double(w0[i]));
  }
  ASSERT_TRUE(WaitVersion("momentum", 2)) << Status("momentum").dump();
  EXPECT_LT(MaxDiff(Download("momentum", 2), expected), 1e-5);
}

// spec.deadlines.round: a round that has its quorum commits at the deadline without the
// missing client; one below quorum is extended, not dropped.
TEST_F(FlJobTest, RoundDeadlineCommitsWithAQuorumAndExtendsWithout) {
  ASSERT_EQ(
      shoald_
          .Deploy(Manifest("deadline", "fedavg", 3, 2, "  deadlines: {round: 1s}\n", ", quorum: 2"))
          .exit_code,
      0);
  std::vector<Client> clients = JoinAll("deadline", 3);
  const std::vector<float> w0 = Download("deadline", 0);
  std::vector<std::string> bodies;
  for (int k = 0; k < 2; ++k) {
    std::vector<float> params = w0;
    uint64_t n = 0;
    ASSERT_EQ(Push("deadline", Train("deadline", clients[k], k, 0, params, &n)).status, 202);
  }
  EXPECT_EQ(Status("deadline").value("version", -1), 0) << "waits for the third client";
  ASSERT_TRUE(WaitVersion("deadline", 1)) << Status("deadline").dump();
  EXPECT_EQ(Status("deadline")["versions"][1].value("updates", 0), 2);
  // Round 2: one update, below the quorum: the deadline passes and the round stays open.
  const std::vector<float> w1 = Download("deadline", 1);
  std::vector<float> params = w1;
  uint64_t n = 0;
  ASSERT_EQ(Push("deadline", Train("deadline", clients[2], 2, 1, params, &n)).status, 202);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Status("deadline").value("version", -1), 1);
  EXPECT_NE(shoald_.Log().find("missed its deadline with 1 of quorum 2"), std::string::npos);
  params = w1;
  ASSERT_EQ(Push("deadline", Train("deadline", clients[0], 0, 1, params, &n)).status, 202);
  ASSERT_TRUE(WaitVersion("deadline", 2)) << Status("deadline").dump();
  EXPECT_EQ(Status("deadline")["versions"][2].value("updates", 0), 2);
}

// FedFix: at each tick w ← w + Σ p_k Δ_k with p_k the data share; two equal shards: the average.
TEST_F(FlJobTest, FedFixCommitsDataShareWeightedDeltasAtItsTick) {
  std::string manifest = Manifest("fix", "fedfix", 2, 10);
  const std::string plain = "algorithm: {name: fedfix}";
  manifest.replace(manifest.find(plain), plain.size(),
                   "algorithm: {name: fedfix, params: {period: 0.3}}");
  ASSERT_EQ(shoald_.Deploy(manifest).exit_code, 0);
  std::vector<Client> clients = JoinAll("fix", 2);
  const std::vector<float> w0 = Download("fix", 0);
  std::vector<double> expected(w0.size(), 0.0);
  std::vector<std::string> bodies;
  for (int k = 0; k < 2; ++k) {
    std::vector<float> params = w0;
    uint64_t n = 0;
    bodies.push_back(Train("fix", clients[k], k, 0, params, &n));
    for (size_t i = 0; i < params.size(); ++i) expected[i] += 0.5 * params[i];
  }
  // Both are Δs from version 0, so whether one tick or two take them, the model that includes
  // both is w0 + ½Δ0 + ½Δ1.
  for (const auto& body : bodies) ASSERT_EQ(Push("fix", body).status, 202);
  uint64_t version = 0;
  for (int i = 0; i < 200; ++i) {
    Json st = Status("fix");
    uint32_t counted = 0;
    for (const auto& v : st["versions"]) counted += v.value("updates", 0u);
    version = st.value("version", uint64_t{0});
    if (counted == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(version, 1u);
  EXPECT_LE(version, 2u);
  EXPECT_LT(MaxDiff(Download("fix", version), expected), 1e-5);
}

using FlDigitsTest = DigitsShoaldTest;
using FlHistoryTest = DigitsShoaldTest;

// A whole small job on sklearn's digits through real shoald, HTTP, leaf instances and the
// shoal-client binary (FedAvg, 4 IID clients, MLP 64-64-10): the committed model reaches 90%
// test accuracy.
TEST_F(FlDigitsTest, ShoalClientTrainsDigitsToNinetyPercent) {
  const std::string manifest =
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: digits\nspec:\n"
      "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 64, seed: 1}\n"
      "  data: {dataset: digits}\n  clients: {expected: 4}\n"
      "  stop: {rounds: 60, accuracy: 0.95}\n"
      "  training: {localSteps: 40, learningRate: 0.1, batchSize: 32}\n"
      "  aggregation: {maxFanIn: 2, maxLeaves: 2}\n";
  // The clients authenticate as a user's would: an fl-client token of their job.
  std::string token;
  ASSERT_NO_FATAL_FAILURE(DeployFlJob(manifest, "digits", &token));
  const std::string out = RunDigitsClients("digits", token, "--max-seconds 25");
  auto st = Json::parse(shoald_.Api("GET", "/v1/jobs/digits").body, nullptr, false);
  const uint64_t version = st.value("version", uint64_t{0});
  ASSERT_GE(version, 1u) << out;
  const std::vector<float> w = ModelOf("digits", version, model::MlpSpec(64, {64}, 10));
  ASSERT_FALSE(w.empty());
  auto eval = client::Evaluate({64, 64, 10}, w, data_.test);
  ASSERT_TRUE(eval.ok());
  EXPECT_GE(eval->accuracy, 0.90) << out;
  std::cerr << "digits: version " << version << ", test accuracy " << eval->accuracy << " on "
            << data_.test.num_samples << " samples\n";
}

// A long job keeps the records of its latest 256 versions (status and state.json): its status
// and checkpoint state no longer grow with every commit (they did, and shoald's memory with
// them: about 1 KiB per update in a 300 s soak; each commit and status also re-serialised the
// whole history).
TEST_F(FlHistoryTest, ALongJobKeepsItsLatest256VersionsInStatusAndState) {
  std::string token;
  ASSERT_NO_FATAL_FAILURE(
      DeployFlJob("apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: hist\nspec:\n"
                  "  algorithm: {name: fedbuff}\n  model: {architecture: mlp, hidden: 16, "
                  "seed: 1}\n  data: {dataset: digits}\n  clients: {expected: 4}\n"
                  "  stop: {rounds: 300}\n"
                  "  training: {localSteps: 2, learningRate: 0.1, batchSize: 32}\n",
                  "hist", &token));
  const std::string out = RunDigitsClients("hist", token, "--no-evaluator --max-seconds 120");
  auto st = Json::parse(shoald_.Api("GET", "/v1/jobs/hist").body, nullptr, false);
  ASSERT_EQ(st.value("version", uint64_t{0}), 300u) << st.dump().substr(0, 500) << out;
  EXPECT_EQ(st.value("state", ""), "done");
  const Json& versions = st["versions"];
  ASSERT_EQ(versions.size(), 256u);
  EXPECT_EQ(versions.front()["version"], 45);
  EXPECT_EQ(versions.back()["version"], 300);
  for (size_t i = 1; i < versions.size(); ++i) {
    ASSERT_EQ(versions[i]["version"].get<uint64_t>(),
              versions[i - 1]["version"].get<uint64_t>() + 1);
  }
  // The checkpoint state holds the same window, once the checkpoint writer (behind the commits)
  // has written the last version's.
  Json state;
  const bool written = WaitFor(
      [&] {
        std::ifstream f(shoald_.state_dir() + "/state/jobs/hist/state.json");
        state = Json::parse(f, nullptr, false);
        return !state.is_discarded() && state["versions"].is_array() &&
               !state["versions"].empty() && state["versions"].back()["version"] == 300;
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(written) << state.dump().substr(0, 300);
  EXPECT_EQ(state["versions"].size(), 256u);
}

// The bytes of `pid`'s mapping of its tenant pool (/dev/shm/shoal.*) that have page-table
// entries in that process (smaps' Rss; -1 if it has no such mapping).
int64_t PoolRss(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool in_pool = false, found = false;
  int64_t kb = 0;
  while (std::getline(in, line)) {
    const auto dash = line.find('-');
    if (dash != std::string::npos && dash < line.find(' ') && line.find(':') > dash) {
      in_pool = line.find(" /dev/shm/shoal.") != std::string::npos;
      found = found || in_pool;
      continue;
    }
    if (in_pool && line.rfind("Rss:", 0) == 0) kb += std::stoll(line.substr(4));
  }
  return found ? kb * 1024 : -1;
}

// pool_prefault: the leaf (a handler that reads whole updates) installs its page-table entries
// for the whole pre-faulted pool once at start, so that no update it folds faults; a function
// that does not ask for it (echo) keeps the mapping it touched. The leaf still folds.
TEST(FlPoolPrefaultTest, TheLeafMapsThePrefaultedPoolWholeAndEchoDoesNot) {
  Shoald shoald;
  Shoald::Options o;
  o.pool = "boost";
  o.pool_bytes = uint64_t{64} << 20;
  o.max_body_bytes = uint64_t{16} << 20;
  o.extra_yaml = "pool_prefault: true\n";
  ASSERT_TRUE(shoald.Start(o)) << shoald.Log();
  ASSERT_EQ(shoald.Deploy(Manifest("warm", "fedavg", 2, 1)).exit_code, 0);
  const std::string echo =
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
      "spec:\n  handler: {builtin: echo}\n  scale: {min: 1}\n";
  ASSERT_EQ(shoald.Deploy(echo).exit_code, 0);
  ASSERT_TRUE(shoald.WaitReady("fl.warm", 1, 30000)) << shoald.Log();
  ASSERT_TRUE(shoald.WaitReady("echo", 1)) << shoald.Log();
  const std::vector<int> leaves = shoald.InstancePids("fl.warm");
  const std::vector<int> echoes = shoald.InstancePids("echo");
  ASSERT_EQ(leaves.size(), 1u);
  ASSERT_EQ(echoes.size(), 1u);
  // The populate runs beside the leaf's event loop: wait for its log line (the instances' logs).
  const std::string populated = "pool: mapping populated: 64 MiB in ";
  auto logs = [&](const std::string& fn) {
    std::ifstream f(shoald.state_dir() + "/state/logs/" + fn + ".log");
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  for (int i = 0; i < 500 && logs("fl.warm").find(populated) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(logs("fl.warm").find(populated), std::string::npos) << logs("fl.warm");
  EXPECT_EQ(PoolRss(leaves[0]), int64_t{64} << 20);
  EXPECT_EQ(logs("echo").find("pool: mapping populated"), std::string::npos) << logs("echo");
  const int64_t echo_rss = PoolRss(echoes[0]);
  EXPECT_GE(echo_rss, 0) << "echo maps the pool";
  EXPECT_LT(echo_rss, int64_t{32} << 20) << "echo did not populate it";

  auto r = shoald.Api("POST", "/v1/jobs/warm/join", "{\"name\":\"a\"}",
                      {"Content-Type: application/json"});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = Json::parse(r.body, nullptr, false);
  const model::ModelSpec spec = model::MlpSpec(784, {kHidden}, 10);
  const std::string body = UpdateBody(spec, std::vector<float>(spec.num_params(), 0.5f), "warm",
                                      j.value("client_id", ""), j.value("token", ""), 0, 10);
  auto up = Http(shoald.port(), "POST", "/v1/jobs/warm/updates", body,
                 {"Content-Type: application/octet-stream", shoald.AuthHeader()});
  EXPECT_EQ(up.status, 202) << up.body;
  EXPECT_EQ(Json::parse(shoald.Api("GET", "/v1/jobs/warm").body, nullptr, false)
                .value("updates_total", -1),
            1);
}

// The /dev/shm file of the tenant pool `pid` maps, and the bytes of it in memory (st_blocks).
std::pair<std::string, int64_t> PoolFileOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find(" /dev/shm/shoal.");
    if (at == std::string::npos) continue;
    const std::string path = line.substr(at + 1);
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return {path, -1};
    return {path, static_cast<int64_t>(st.st_blocks) * 512};
  }
  return {"", -1};
}

// Two updates of a 1.6M-parameter model (6.5 MB each) on a fresh shoald with a Boost pool of
// 256 MiB and `warm_yaml`; the committed model's bytes, the leaf's pid and the pool file's
// allocated bytes before and after the updates.
struct WarmRun {
  std::string model;
  int64_t allocated_before = -1, allocated_after = -1, leaf_rss = -1;
  std::string leaf_log, log;
};
WarmRun RunTwoUpdates(const std::string& warm_yaml, bool wait_for_follower) {
  WarmRun out;
  Shoald shoald;
  Shoald::Options o;
  o.pool = "boost";
  o.pool_bytes = uint64_t{256} << 20;
  o.max_body_bytes = uint64_t{64} << 20;
  o.extra_yaml = warm_yaml;
  EXPECT_TRUE(shoald.Start(o)) << shoald.Log();
  constexpr uint32_t kWide = 2048;
  const std::string manifest =
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: wide\nspec:\n"
      "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: " +
      std::to_string(kWide) +
      "}\n  clients: {expected: 2}\n  stop: {rounds: 1}\n"
      "  aggregation: {maxFanIn: 2, maxLeaves: 1}\n";
  EXPECT_EQ(shoald.Deploy(manifest).exit_code, 0) << shoald.Log();
  EXPECT_TRUE(shoald.WaitReady("fl.wide", 1, 30000)) << shoald.Log();
  const std::vector<int> leaves = shoald.InstancePids("fl.wide");
  EXPECT_EQ(leaves.size(), 1u);
  if (leaves.size() != 1) return out;
  auto leaf_log = [&] {
    std::ifstream f(shoald.state_dir() + "/state/logs/fl.wide.log");
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  // The leaf maps the warm pages beside its event loop: wait for its log line.
  for (int i = 0; wait_for_follower && i < 500 &&
                  leaf_log().find("pool: warm pages mapped: ") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // ...and for it to have mapped the whole 32 MiB window: shoald publishes the window as it
  // warms it, so the leaf's first line may name only a part of it (25 MiB on a loaded machine).
  for (int i = 0; wait_for_follower && i < 500 && PoolRss(leaves[0]) < (int64_t{32} << 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.allocated_before = PoolFileOf(leaves[0]).second;
  out.leaf_rss = PoolRss(leaves[0]);

  const model::ModelSpec spec = model::MlpSpec(784, {kWide}, 10);
  const std::vector<std::pair<float, uint64_t>> updates = {{0.5f, 10}, {1.5f, 30}};
  for (size_t k = 0; k < updates.size(); ++k) {
    auto r = shoald.Api("POST", "/v1/jobs/wide/join", "{\"name\":\"c" + std::to_string(k) + "\"}",
                        {"Content-Type: application/json"});
    EXPECT_EQ(r.status, 200) << r.body;
    const Json j = Json::parse(r.body, nullptr, false);
    std::vector<float> values(spec.num_params());
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = updates[k].first + static_cast<float>(i % 1000) * 1e-3f;
    }
    const std::string body = UpdateBody(spec, std::move(values), "wide", j.value("client_id", ""),
                                        j.value("token", ""), 0, updates[k].second);
    auto up = Http(shoald.port(), "POST", "/v1/jobs/wide/updates", body,
                   {"Content-Type: application/octet-stream", shoald.AuthHeader()});
    EXPECT_EQ(up.status, 202) << up.body;
  }
  for (int i = 0; i < 500; ++i) {
    const Json st = Json::parse(shoald.Api("GET", "/v1/jobs/wide").body, nullptr, false);
    if (st.value("version", uint64_t{0}) >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto m = shoald.Api("GET", "/v1/jobs/wide/model?version=1");
  EXPECT_EQ(m.status, 200) << m.body;
  out.model = m.body;
  // The window refills behind the allocations (in batches): wait for it to have moved.
  for (int i = 0; wait_for_follower && i < 500; ++i) {
    out.allocated_after = PoolFileOf(leaves[0]).second;
    if (out.allocated_after >= out.allocated_before + (int64_t{8} << 20)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.allocated_after = PoolFileOf(leaves[0]).second;
  out.leaf_log = leaf_log();
  out.log = shoald.Log();
  return out;
}

// pool_warm_bytes, without pool_prefault: shoald keeps a window of the FL job's never-used pool
// memory allocated above its highest allocation (not the whole pool), the leaf maps those pages
// beside its event loop as they move, and the updates that land there fold to the same bytes
// as on a pool that is not warmed.
TEST(FlPoolWarmTest, AWindowIsWarmedAheadTheLeafFollowsItAndTheFoldIsByteIdentical) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const WarmRun warm = RunTwoUpdates("pool_warm_bytes: 33554432\n", true);
  EXPECT_NE(warm.log.find("keeping 32 MiB warm ahead of its allocations (pool_warm_bytes)"),
            std::string::npos)
      << warm.log;
  EXPECT_NE(warm.leaf_log.find("pool: warm pages mapped: "), std::string::npos) << warm.leaf_log;
  EXPECT_GE(warm.allocated_before, 32 * kMiB) << "the window is allocated";
  EXPECT_LE(warm.allocated_before, 40 * kMiB) << "and not the whole 256 MiB pool";
  EXPECT_GE(warm.leaf_rss, 32 * kMiB) << "the leaf mapped the window";
  // Two 6.5 MB updates and a partial sum (19.5 MB) moved the high-water mark, and the window
  // refilled above it once its margin fell under three quarters (24 MiB).
  EXPECT_GE(warm.allocated_after, warm.allocated_before + 8 * kMiB);
  EXPECT_LE(warm.allocated_after, 128 * kMiB) << "and never the whole pool";

  const WarmRun cold = RunTwoUpdates("pool_warm_bytes: 0\n", false);
  EXPECT_EQ(cold.log.find("warm ahead of its allocations"), std::string::npos) << cold.log;
  EXPECT_EQ(cold.leaf_log.find("pool: warm pages mapped: "), std::string::npos) << cold.leaf_log;
  EXPECT_LT(cold.allocated_before, 8 * kMiB) << "a pool not warmed is sparse";
  ASSERT_GT(warm.model.size(), size_t{6} << 20);
  ASSERT_EQ(warm.model.size(), cold.model.size());
  EXPECT_TRUE(warm.model == cold.model) << "the committed models differ";
}

}  // namespace
}  // namespace shoal::testing
