// shoal-client's protocol client, model cache and simulated-client runner against an
// in-process fake of shoald's FL job protocol on a real socket (fake_fl_server.h), and the
// built binary's start-up errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "fake_fl_server.h"
#include "shoal/fl/client/fl_client_runner.h"
#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/client/model_cache.h"

namespace shoal::client {
namespace {

using testing::FakeFlConfig;
using testing::FakeFlServer;

// A port nothing listens on: bind one, read its number, close it.
std::string ClosedPortUrl() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

struct Ran {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Ran RunBinary(const std::string& args) {
  Ran r;
  const std::string cmd = std::string(SHOAL_CLIENT_BIN) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(FlHttpClient, UnreachableServerIsUnavailableWithTheUrl) {
  const std::string url = ClosedPortUrl();
  FlHttpClient http(url, "fmnist");
  auto st = http.JobStatus();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(st.status().message().starts_with("cannot reach shoald at " + url + ": "))
      << st.status().message();
  EXPECT_TRUE(IsRetryable(st.status()));
}

TEST(FlHttpClient, ProtocolCallsAgainstTheFake) {
  FakeFlServer server(FakeFlConfig{});
  FlHttpClient http(server.url() + "/", "fmnist");  // a trailing slash is fine

  auto st = http.JobStatus();
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->state, "running");
  EXPECT_EQ(st->version, 0u);

  FlHttpClient other(server.url(), "nope");
  auto missing = other.JobStatus();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("job 'nope' not found"), std::string::npos)
      << missing.status().message();

  auto joined = http.Join("client-0", "");
  ASSERT_TRUE(joined.ok()) << joined.status().message();
  EXPECT_EQ(joined->client_id, "id-client-0");
  EXPECT_EQ(joined->token, "tok-client-0");

  auto bad = http.Task(joined->client_id, "wrong");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(IsRetryable(bad.status()));

  auto wait = http.Task(joined->client_id, joined->token);
  ASSERT_TRUE(wait.ok()) << wait.status().message();
  EXPECT_EQ(wait->kind, TaskResult::Kind::kWait);
  EXPECT_EQ(wait->retry_after_ms, 20u);
  auto train = http.Task(joined->client_id, joined->token);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->kind, TaskResult::Kind::kTrain);
  EXPECT_EQ(train->model_version, 0u);
  EXPECT_EQ(train->local_steps, 5u);
  EXPECT_EQ(train->batch_size, 8u);
  EXPECT_DOUBLE_EQ(train->learning_rate, 0.1);

  auto m = http.Model(0);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->version, 0u);
  auto parsed =
      MlpModelFromSafetensors(std::as_bytes(std::span(m->bytes.data(), m->bytes.size())), 0);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->shape.inputs, 16);
  EXPECT_EQ(parsed->shape.hidden, 8);
  EXPECT_EQ(parsed->shape.classes, 4);
  // Written in reverse order by the fake, placed by name: equal to the initial model.
  EXPECT_EQ(parsed->model.values, model::InitModel(model::MlpSpec(16, {8}, 4), 7).values);
  auto gone = http.Model(9);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);

  // 503 with Retry-After: retryable, and the delay is known.
  model::UpdateMeta meta{"fmnist", "id-client-0", "tok-client-0", 0, 10, 5, 0.5};
  auto body = model::EncodeUpdate(meta, parsed->model, model::DType::kF32);
  ASSERT_TRUE(body.ok());
  const std::string_view bytes(reinterpret_cast<const char*>(body->data()), body->size());
  const Status busy = http.PostUpdate(bytes);
  EXPECT_EQ(busy.code(), StatusCode::kResourceExhausted) << busy.message();
  EXPECT_TRUE(IsRetryable(busy));
  EXPECT_EQ(http.retry_after_ms(), 1000u);
  const Status ok = http.PostUpdate(bytes);
  EXPECT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(http.retry_after_ms(), 0u);

  EXPECT_TRUE(http.PostEval({"id-client-0", "tok-client-0", 0, 0.5, 1.2, 100}).ok());
  ASSERT_EQ(server.evals().size(), 1u);
  EXPECT_DOUBLE_EQ(server.evals()[0].accuracy, 0.5);
  EXPECT_EQ(server.evals()[0].samples, 100u);
  EXPECT_TRUE(server.errors().empty()) << server.errors()[0];
}

TEST(ModelCache, ConcurrentCallersForOneVersionCauseOneDownload) {
  FakeFlServer server(FakeFlConfig{});
  ModelCache cache(2);
  std::atomic<int> fetches{0};
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      FlHttpClient http(server.url(), "fmnist");
      auto m = cache.Get(0, [&](uint64_t v) {
        ++fetches;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // others arrive meanwhile
        return http.Model(v);
      });
      if (m.ok() && (*m)->version == 0) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(fetches, 1);
  EXPECT_EQ(cache.downloads(), 1u);
  EXPECT_EQ(server.model_downloads().at(0), 1);

  // A failed download is not cached: the next caller tries again.
  FlHttpClient http(server.url(), "fmnist");
  auto fetch = [&](uint64_t v) { return http.Model(v); };
  EXPECT_EQ(cache.Get(5, fetch).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache.Get(5, fetch).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache.downloads(), 3u);
  EXPECT_TRUE(cache.Get(0, fetch).ok());
  EXPECT_EQ(cache.downloads(), 3u);
}

TEST(ModelCache, EvictsTheOldestBeyondCapacity) {
  model::Model m = model::InitModel(model::MlpSpec(16, {8}, 4), 1);
  const auto file = model::ModelToSafetensors(m);
  auto fetch = [&](uint64_t v) -> Result<FlModelBytes> {
    return FlModelBytes{v, std::string(reinterpret_cast<const char*>(file.data()), file.size())};
  };
  ModelCache cache(2);
  for (uint64_t v : {1, 2, 3}) ASSERT_TRUE(cache.Get(v, fetch).ok());
  EXPECT_EQ(cache.downloads(), 3u);
  ASSERT_TRUE(cache.Get(3, fetch).ok());
  ASSERT_TRUE(cache.Get(2, fetch).ok());
  EXPECT_EQ(cache.downloads(), 3u);
  ASSERT_TRUE(cache.Get(1, fetch).ok());  // evicted: downloaded again
  EXPECT_EQ(cache.downloads(), 4u);
}

TEST(ModelCache, RefusesAModelThatIsNotAOneHiddenLayerMlp) {
  model::Model m = model::InitModel(model::LogRegSpec(16, 4), 1);
  const auto file = model::ModelToSafetensors(m);
  auto r = MlpModelFromSafetensors(file, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not an mlp"), std::string::npos) << r.status().message();
}

TEST(RunFlClients, TwoClientsAgainstAFedAvgFake) {
  Dataset all = MakeSyntheticDataset(700, 16, 4, 3, 0.1F);
  std::vector<uint32_t> tr(600), te(100);
  for (uint32_t i = 0; i < 700; ++i) (i < 600 ? tr[i] : te[i - 600]) = i;
  const Dataset train = Subset(all, tr), test = Subset(all, te);

  FlClientPlan plan;
  plan.partitions = {{}, {}};
  for (uint32_t i = 0; i < 600; ++i) plan.partitions[i < 250 ? 0 : 1].push_back(i);
  plan.step_seconds = {0.01, 0.02};

  FlRunOptions o;
  o.job = "fmnist";
  o.time_scale = 0.5;
  o.status_poll_ms = 20;
  o.max_seconds = 60;
  o.seed = 5;
  o.wire_dtype = model::DType::kBF16;
  std::ostringstream log;
  o.log = &log;

  FakeFlConfig config;
  config.partition_sizes = {{"client-0", 250}, {"client-1", 350}};
  config.train_seconds = {{"client-0", 5 * 0.01 * 0.5}, {"client-1", 5 * 0.02 * 0.5}};
  FakeFlServer server(config);
  o.server = server.url();

  auto summary = RunFlClients(o, train, test, plan);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  const auto errors = server.errors();
  EXPECT_TRUE(errors.empty()) << errors[0];
  EXPECT_EQ(server.version(), 3u);
  EXPECT_TRUE(summary->job_done);
  EXPECT_FALSE(summary->timed_out);
  EXPECT_EQ(summary->clients_failed, 0);

  // Three rounds of two, plus one update answered 503 (then sent again) and one answered 409.
  const auto updates = server.updates();
  EXPECT_EQ(summary->updates_accepted, 6u);
  EXPECT_EQ(summary->update_retries, 1u);
  EXPECT_EQ(summary->updates_stale, 1u);
  EXPECT_EQ(summary->updates_rejected, 0u);
  EXPECT_EQ(summary->tasks_trained, 7u);
  int accepted = 0;
  for (const auto& u : updates) accepted += u.status == 202;
  EXPECT_EQ(accepted, 6);
  ASSERT_EQ(updates.size(), 8u);

  // The 503'd update comes back byte for byte; the 409'd one is dropped for a new task.
  std::vector<const testing::ReceivedUpdate*> c0, c1;
  for (const auto& u : updates) (u.client_name == "client-0" ? c0 : c1).push_back(&u);
  ASSERT_GE(c0.size(), 2u);
  EXPECT_EQ(c0[0]->status, 503);
  EXPECT_EQ(c0[1]->status, 202);
  EXPECT_EQ(c0[0]->body, c0[1]->body);
  ASSERT_GE(c1.size(), 2u);
  EXPECT_EQ(c1[0]->status, 409);
  EXPECT_EQ(c1[1]->status, 202);
  EXPECT_NE(c1[0]->body, c1[1]->body);
  const auto events = server.events().at("client-1");
  const auto first_update = std::find(events.begin(), events.end(), "update");
  ASSERT_NE(first_update, events.end());
  EXPECT_EQ(*(first_update + 1), "task");

  // Waits were honoured; a client hears "done" at most once (or the status poll saw the job
  // done first and stopped it).
  for (const char* name : {"client-0", "client-1"}) {
    EXPECT_GE(server.waits_sent()[name], 1) << name;
    EXPECT_LE(server.dones_sent()[name], 1) << name;
  }

  // One download per version, shared by both clients and the evaluator.
  for (const auto& [v, n] : server.model_downloads()) EXPECT_EQ(n, 1) << "version " << v;
  EXPECT_EQ(server.model_downloads().size(), summary->model_downloads);

  // The evaluator reported under client 0's identity, the last report being the final model.
  const auto evals = server.evals();
  ASSERT_FALSE(evals.empty());
  for (const auto& e : evals) {
    EXPECT_EQ(e.client_id, "id-client-0");
    EXPECT_EQ(e.token, "tok-client-0");
    EXPECT_GE(e.accuracy, 0.0);
    EXPECT_LE(e.accuracy, 1.0);
    EXPECT_GT(e.loss, 0.0);
    EXPECT_EQ(e.samples, 100u);
  }
  EXPECT_EQ(evals.back().version, 3u);
  EXPECT_EQ(summary->evals_posted, evals.size());
  EXPECT_TRUE(summary->evaluated);
  EXPECT_EQ(summary->final_version, 3u);
  EXPECT_DOUBLE_EQ(summary->final_accuracy, evals.back().accuracy);
  // Separable clusters: three FedAvg rounds of five steps learn them.
  EXPECT_GT(summary->final_accuracy, 0.5);
  EXPECT_NE(log.str().find("version 3  accuracy "), std::string::npos) << log.str();
}

// --attack lie: the two attackers of each round pool their honest models and send the same
// one (mean - z std of theirs: attack_test.cc checks the arithmetic), the honest client its own.
TEST(RunFlClients, LieAttackersOfARoundSendOneModel) {
  Dataset all = MakeSyntheticDataset(600, 16, 4, 3, 0.1F);
  FlClientPlan plan;
  plan.partitions = {{}, {}, {}};
  for (uint32_t i = 0; i < 600; ++i) plan.partitions[i % 3].push_back(i);
  plan.step_seconds = {0.01, 0.01, 0.01};
  FlRunOptions o;
  o.job = "fmnist";
  o.time_scale = 0;
  o.status_poll_ms = 20;
  o.max_seconds = 60;
  o.evaluator = false;
  o.attack = *ParseAttackSpec("lie:1");
  o.attackers = 2;
  FakeFlConfig config;
  config.clients = 3;
  config.answer_503_to = "";
  config.answer_409_to = "";
  FakeFlServer server(config);
  o.server = server.url();

  auto summary = RunFlClients(o, all, Dataset{}, plan);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_TRUE(server.errors().empty()) << server.errors()[0];
  EXPECT_EQ(server.version(), 3u);
  EXPECT_EQ(summary->lie_colluded, 6u);  // 3 rounds x 2 attackers
  EXPECT_EQ(summary->lie_pooled, 12u);   // each from both attackers' models
  EXPECT_EQ(summary->lie_alone, 0u);
  // Per version: the tensors the attackers sent, byte for byte.
  std::map<uint64_t, std::map<std::string, std::string>> sent;
  for (const auto& u : server.updates()) {
    ASSERT_EQ(u.status, 202) << u.client_name;
    auto view = model::ParseUpdate(
        std::as_bytes(std::span<const char>(u.body.data(), u.body.size())), config.spec);
    ASSERT_TRUE(view.ok());
    sent[u.base_version][u.client_name] = u.body.substr(view->tensor_area_offset);
  }
  ASSERT_EQ(sent.size(), 3u);
  for (auto& [version, by_client] : sent) {
    ASSERT_EQ(by_client.size(), 3u) << version;
    EXPECT_EQ(by_client["client-1"], by_client["client-2"]) << version;
    EXPECT_NE(by_client["client-0"], by_client["client-1"]) << version;
  }
  // Two attackers, or a z the paper's formula cannot give, are needed.
  o.attackers = 1;
  EXPECT_EQ(RunFlClients(o, all, Dataset{}, plan).status().message(),
            "attack lie: the attackers pool their models, so it needs at least 2 attackers "
            "(got 1)");
  o.attackers = 2;
  o.attack.value = 0;  // z_max for n 3, f 2: s = 2 - 2 = 0
  EXPECT_EQ(RunFlClients(o, all, Dataset{}, plan).status().message(),
            "lie: 2 attackers of 3 clients need no supporters (s = floor(n/2 + 1) - f = 0): "
            "z_max is unbounded, give one as lie:<z>");
}

TEST(RunFlClients, MaxSecondsStopsARunThatNeverEnds) {
  Dataset train = MakeSyntheticDataset(100, 16, 4, 3);
  FlClientPlan plan{{{}}, {0.01}};
  for (uint32_t i = 0; i < 100; ++i) plan.partitions[0].push_back(i);
  FakeFlConfig config;
  config.clients = 2;  // only one runs: the round never completes
  config.answer_503_to = "";
  FakeFlServer server(config);
  FlRunOptions o;
  o.server = server.url();
  o.job = "fmnist";
  o.evaluator = false;
  o.max_seconds = 1.0;
  o.status_poll_ms = 20;
  o.time_scale = 0;
  auto summary = RunFlClients(o, train, Dataset{}, plan);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_TRUE(summary->timed_out);
  EXPECT_FALSE(summary->job_done);
  EXPECT_EQ(summary->updates_accepted, 1u);
  EXPECT_EQ(summary->evals_posted, 0u);
  EXPECT_TRUE(server.evals().empty());
}

TEST(RunFlClients, ClientsToldDoneEndTheRunWithoutWaitingForThePoll) {
  Dataset train = MakeSyntheticDataset(100, 16, 4, 3);
  FlClientPlan plan{{{}, {}}, {0.01, 0.01}};
  for (uint32_t i = 0; i < 100; ++i) plan.partitions[i % 2].push_back(i);
  FakeFlConfig config;
  config.final_version = 1;
  config.answer_503_to = config.answer_409_to = "";
  FakeFlServer server(config);
  FlRunOptions o;
  o.server = server.url();
  o.job = "fmnist";
  o.evaluator = false;
  o.status_poll_ms = 60000;  // the first poll sees version 0; the next would be a minute later
  o.time_scale = 0;
  const auto start = std::chrono::steady_clock::now();
  auto summary = RunFlClients(o, train, Dataset{}, plan);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(server.dones_sent()["client-0"], 1);
  EXPECT_EQ(server.dones_sent()["client-1"], 1);
  EXPECT_TRUE(summary->job_done);
  EXPECT_EQ(summary->updates_accepted, 2u);
  EXPECT_EQ(summary->last_version, 1u);  // the last poll, made when the clients were out
}

TEST(RunFlClients, NoClientCanJoinAnUnknownJob) {
  FakeFlServer server(FakeFlConfig{});
  Dataset train = MakeSyntheticDataset(100, 16, 4, 3);
  FlClientPlan plan{{{0, 1, 2}}, {0.01}};
  FlRunOptions o;
  o.server = server.url();
  o.job = "other";
  o.evaluator = false;
  auto summary = RunFlClients(o, train, Dataset{}, plan);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), StatusCode::kNotFound);
}

TEST(ShoalClientBinary, UnreachableServerExitsTwoWithTheMessage) {
  const std::string url = ClosedPortUrl();
  const Ran r = RunBinary("--server " + url + " --job fmnist --clients 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shoal-client: cannot reach shoald at " + url + ": "), std::string::npos)
      << r.output;
}

TEST(ShoalClientBinary, UnknownJobIsNamed) {
  FakeFlServer server(FakeFlConfig{});
  const Ran r = RunBinary("--server " + server.url() + " --job nope --clients 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("shoal-client: job 'nope' not found at " + server.url()),
            std::string::npos)
      << r.output;
}

TEST(ShoalClientBinary, MissingDatasetGivesTheLoadersMessage) {
  FakeFlServer server(FakeFlConfig{});
  const Ran r = RunBinary("--server " + server.url() +
                          " --job fmnist --clients 2 --data-dir /nonexistent/fmnist");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/fmnist"), std::string::npos) << r.output;
}

TEST(ShoalClientBinary, SyntheticRunToDone) {
  FakeFlConfig config;
  config.spec = model::MlpSpec(784, {8}, 10);
  config.answer_503_to = "";
  config.final_version = 2;
  FakeFlServer server(config);
  const Ran r = RunBinary("--server " + server.url() +
                          " --job fmnist --clients 2 --data synthetic --partition iid "
                          "--speeds uniform:0.01,0.01 --dtype f16 --max-seconds 60");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(server.errors().empty()) << server.errors()[0];
  EXPECT_EQ(server.version(), 2u);
  for (const char* line : {"shoal-client: server ", "2 clients, partition iid", "speeds uniform",
                           "updates as F16, evaluator on (client 0)", "version 0  accuracy ",
                           "version 2  accuracy ", "shoal-client: job done after ",
                           "4 updates accepted (1 stale", "shoal-client: final accuracy "}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
}

}  // namespace
}  // namespace shoal::client
