// Inference end to end through a real shoald: an FL job's model served by an `inference`
// function over the Open Inference Protocol (/v2), its answers checked against the same MLP
// computed here from the downloaded weights; batching across many connections; every
// protocol route and bad-request answer through the gateway; and hot swap while a real FL job
// (shoal-client subprocess) commits versions, with zero failed requests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/tools/flsim/dataset.h"
#include "tests/support/shoald_data_test.h"
#include "tests/support/threads_for_test.h"
#include "tests/support/wait_for.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
constexpr uint32_t kHidden = 32;

std::string JobManifest(const std::string& name, const std::string& algorithm, uint32_t rounds) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm: {name: " + algorithm +
         "}\n  model: {architecture: mlp, hidden: " + std::to_string(kHidden) +
         "}\n  clients: {expected: 4}\n  stop: {rounds: " + std::to_string(rounds) +
         "}\n  training: {localSteps: 30, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 4, maxLeaves: 1}\n";
}

std::string InferManifest(const std::string& job, uint32_t max_batch = 16) {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: " + job +
         "-infer}\nspec:\n  handler: inference\n  concurrency: 48\n  scale: {min: 1, max: 1}\n"
         "  inference:\n    modelName: " +
         job + "\n    source: {flJob: " + job +
         "}\n    device: cpu\n    maxBatchSize: " + std::to_string(max_batch) +
         "\n    maxQueueDelay: 3ms\n";
}

std::string ImageRequest(const float* pixels, int n, const std::string& id) {
  std::string body = "{\"id\":\"" + id + "\",\"inputs\":[{\"name\":\"input\",\"shape\":[" +
                     std::to_string(n) + ",784],\"datatype\":\"FP32\",\"data\":[";
  char buf[32];
  for (int i = 0; i < n * 784; ++i) {
    std::snprintf(buf, sizeof buf, i ? ",%.6g" : "%.6g", pixels[i]);
    body += buf;
  }
  return body + "]}]}";
}

// The job's MLP (`inputs` wide, one hidden layer of `hidden`), computed here: what every answer
// must equal.
std::vector<float> Forward(const std::vector<float>& w, const float* x, uint32_t inputs = 784,
                           uint32_t hidden = kHidden) {
  const model::ModelSpec spec = model::MlpSpec(inputs, {hidden}, 10);
  const float* w1 = w.data() + spec.offset(0);
  const float* b1 = w.data() + spec.offset(1);
  const float* w2 = w.data() + spec.offset(2);
  const float* b2 = w.data() + spec.offset(3);
  std::vector<float> h(hidden), y(10);
  for (uint32_t j = 0; j < hidden; ++j) {
    double s = b1[j];
    for (uint32_t i = 0; i < inputs; ++i) s += double(w1[j * inputs + i]) * x[i];
    h[j] = s > 0 ? float(s) : 0.0f;
  }
  for (uint32_t c = 0; c < 10; ++c) {
    double s = b2[c];
    for (uint32_t j = 0; j < hidden; ++j) s += double(w2[c * hidden + j]) * h[j];
    y[c] = float(s);
  }
  return y;
}

class InferenceTest : public ShoaldDataTest {
 protected:
  InferenceTest() : ShoaldDataTest(TestData::kFashionMnist, /*check_hugepages=*/false) {}
  void TearDown() override {
    if (client_pid_ > 0) {
      kill(client_pid_, SIGTERM);
      waitpid(client_pid_, nullptr, 0);
    }
    ShoaldDataTest::TearDown();
  }
  void DeployJobAndModel(const std::string& job, const std::string& algorithm, uint32_t rounds) {
    auto d = shoald_.Deploy(JobManifest(job, algorithm, rounds));
    ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
    d = shoald_.Deploy(InferManifest(job));
    ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
    ASSERT_TRUE(shoald_.WaitReady(job + "-infer", 1, 20000)) << shoald_.Log();
    // The inference instance is forked from its function's zygote (its batcher and watcher
    // threads start in the instance): no full spawn.
    EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total",
                             "function=\"" + job + "-infer\",path=\"spawn\""),
              0)
        << shoald_.Log();
  }
  std::vector<float> Weights(const std::string& job, uint64_t version) {
    return ModelOf(job, version, model::MlpSpec(784, {kHidden}, 10));
  }
  HttpResult Infer(const std::string& model, const std::string& body,
                   const std::vector<std::string>& headers = {"Content-Type: application/json"}) {
    return Http(shoald_.port(), "POST", "/v2/models/" + model + "/infer", body, headers);
  }
  Json Stats(const std::string& model) {
    return Json::parse(Http(shoald_.port(), "GET", "/v2/models/" + model + "/stats").body, nullptr,
                       false);
  }
  void StartClients(const std::string& job) {
    const std::string bin = BinDir() + "/shoal-client";
    const std::string server = ServerOf(shoald_);
    const std::string token = shoald_.CreateToken("fl-client", "", job);
    ASSERT_FALSE(token.empty());
    client_pid_ = fork();
    if (client_pid_ == 0) {
      setenv("SHOAL_TOKEN", token.c_str(), 1);
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      execl(bin.c_str(), bin.c_str(), "--server", server.c_str(), "--job", job.c_str(), "--clients",
            "4", "--data", "fashion-mnist", "--train-threads", "1", "--max-seconds", "60",
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }

  pid_t client_pid_ = -1;
};

TEST_F(InferenceTest, ProtocolRoutesAndAnswersEqualTheModel) {
  DeployJobAndModel("fm", "fedavg", 3);
  const uint16_t port = shoald_.port();

  auto live = Http(port, "GET", "/v2/health/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(Json::parse(live.body, nullptr, false)["live"], true);
  auto ready = Http(port, "GET", "/v2/health/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(Json::parse(ready.body, nullptr, false)["ready"], true);
  auto server = Json::parse(Http(port, "GET", "/v2").body, nullptr, false);
  EXPECT_EQ(server["name"], "shoal");
  EXPECT_EQ(server["extensions"], Json::array({"binary_tensor_data"}));

  auto meta_r = Http(port, "GET", "/v2/models/fm");
  ASSERT_EQ(meta_r.status, 200) << meta_r.body;
  auto meta = Json::parse(meta_r.body, nullptr, false);
  EXPECT_EQ(meta["name"], "fm");
  EXPECT_EQ(meta["versions"], Json::array({"0"}));
  EXPECT_EQ(meta["inputs"][0]["name"], "input");
  EXPECT_EQ(meta["inputs"][0]["shape"], Json::array({-1, 784}));
  EXPECT_EQ(meta["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(meta["outputs"][0]["name"], "logits");
  EXPECT_EQ(meta["outputs"][0]["shape"], Json::array({-1, 10}));
  auto mready = Http(port, "GET", "/v2/models/fm/ready");
  EXPECT_EQ(mready.status, 200);
  EXPECT_EQ(Json::parse(mready.body, nullptr, false)["ready"], true);
  EXPECT_EQ(Http(port, "GET", "/v2/models/fm/versions/0").status, 200);
  auto old = Http(port, "GET", "/v2/models/fm/versions/7/ready");
  EXPECT_EQ(old.status, 404);
  EXPECT_NE(old.body.find("version 7 is not loaded"), std::string::npos) << old.body;

  // Unknown model: 404 with an OIP error object.
  auto unknown = Infer("nope", "{}");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Json::parse(unknown.body, nullptr, false)["error"], "model 'nope' not found");
  EXPECT_EQ(Http(port, "GET", "/v2/models/nope/ready").status, 404);

  // Three real test images: every logit equals the MLP computed here.
  const std::vector<float> w = Weights("fm", 0);
  ASSERT_FALSE(w.empty());
  auto r = Infer("fm", ImageRequest(data_.test.Row(0), 3, "req-7"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  auto j = Json::parse(r.body, nullptr, false);
  EXPECT_EQ(j["model_name"], "fm");
  EXPECT_EQ(j["model_version"], "0");
  EXPECT_EQ(j["id"], "req-7");
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], Json::array({3, 10}));
  ASSERT_EQ(j["outputs"][0]["data"].size(), 30u);
  for (int n = 0; n < 3; ++n) {
    const auto expect = Forward(w, data_.test.Row(n));
    for (int c = 0; c < 10; ++c) {
      EXPECT_NEAR(j["outputs"][0]["data"][n * 10 + c].get<float>(), expect[c], 1e-4)
          << "image " << n << " class " << c;
    }
  }

  // The binary-data extension, in and out.
  const std::string header =
      R"({"inputs":[{"name":"input","shape":[2,784],"datatype":"FP32","parameters":{"binary_data_size":6272}}],)"
      R"("outputs":[{"name":"logits","parameters":{"binary_data":true}}]})";
  std::string body = header;
  body.append(reinterpret_cast<const char*>(data_.test.Row(5)), 2 * 784 * sizeof(float));
  auto b = Infer("fm", body,
                 {"Content-Type: application/octet-stream",
                  "Inference-Header-Content-Length: " + std::to_string(header.size())});
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.headers["content-type"], "application/octet-stream");
  ASSERT_TRUE(b.headers.count("inference-header-content-length"));
  const size_t json_len = std::stoul(b.headers["inference-header-content-length"]);
  ASSERT_EQ(b.body.size(), json_len + 2 * 10 * sizeof(float));
  auto bj = Json::parse(b.body.substr(0, json_len), nullptr, false);
  EXPECT_EQ(bj["outputs"][0]["parameters"]["binary_data_size"], 80);
  EXPECT_EQ(bj["outputs"][0]["shape"], Json::array({2, 10}));
  for (int n = 0; n < 2; ++n) {
    const auto expect = Forward(w, data_.test.Row(5 + n));
    for (int c = 0; c < 10; ++c) {
      float got;
      std::memcpy(&got, b.body.data() + json_len + (n * 10 + c) * sizeof(float), sizeof got);
      EXPECT_NEAR(got, expect[c], 1e-4);
    }
  }

  // The same function answers on its /fn/ route too.
  auto fn = Http(port, "POST", "/fn/fm-infer", ImageRequest(data_.test.Row(0), 1, "x"));
  EXPECT_EQ(fn.status, 200) << fn.body;

  // Bad requests: 400 naming what is wrong, through the gateway.
  const std::string shape_bad =
      R"({"inputs":[{"name":"input","shape":[1,785],"datatype":"FP32","data":[1]}]})";
  struct Bad {
    std::string body, message;
  } bad[] = {
      {"{\"inputs\": [", "malformed JSON"},
      {shape_bad, "input 'input': wrong shape [1,785] (the model takes [-1,784])"},
      {R"({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP16","data":[1]}]})",
       "input 'input': wrong datatype FP16 (the model takes FP32)"},
      {R"({"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":[1]}]})",
       "unknown input 'x' (the model's input is 'input')"},
      {R"({"inputs":[]})", "missing input 'input'"},
      {R"({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":["a"]}]})",
       "input 'input': data element 0 is not a number"},
      {R"({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[1,2]}]})",
       "input 'input': shape [1,784] needs 784 values, got 2"},
      {R"({"inputs":[{"name":"input","shape":[17,784],"datatype":"FP32","data":[1]}]})",
       "input 'input': batch of 17 is over the max batch size 16"},
  };
  for (const Bad& c : bad) {
    auto e = Infer("fm", c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    auto ej = Json::parse(e.body, nullptr, false);
    EXPECT_TRUE(ej.is_object() && ej["error"].get<std::string>().starts_with(c.message))
        << e.body << " want " << c.message;
  }
  // ... and change nothing: the next good request is answered as before.
  auto again = Infer("fm", ImageRequest(data_.test.Row(0), 1, "again"));
  ASSERT_EQ(again.status, 200);
  EXPECT_NEAR(Json::parse(again.body)["outputs"][0]["data"][0].get<float>(),
              Forward(w, data_.test.Row(0))[0], 1e-4);
}

TEST_F(InferenceTest, ShoalClientInferScoresTheTestSplitPerVersion) {
  DeployJobAndModel("fc", "fedavg", 3);
  int rc = -1;
  const std::string out =
      RunShoalClient(ServerOf(shoald_), "",
                     "--infer fc --infer-connections 4 --infer-batch 50 --max-seconds 0.5", &rc);
  EXPECT_EQ(rc, 0) << out;
  // Version 0 is the untrained model: every test image classified once. The accuracy printed
  // must be the model's: the same weights computed here over the same 10,000 images (a wrong
  // answer, a lost or repeated image moves it), and near chance for an untrained MLP.
  const std::string head = "final pass over the whole test split:\n  version 0: ";
  const size_t at = out.find(head);
  ASSERT_NE(at, std::string::npos) << out;
  unsigned long images = 0;
  double accuracy = -1;
  ASSERT_EQ(
      std::sscanf(out.c_str() + at + head.size(), "%lu images, accuracy %lf", &images, &accuracy),
      2)
      << out;
  EXPECT_EQ(images, data_.test.num_samples) << out;
  const std::vector<float> w = Weights("fc", 0);
  ASSERT_FALSE(w.empty());
  size_t correct = 0;
  for (size_t i = 0; i < data_.test.num_samples; ++i) {
    const std::vector<float> y = Forward(w, data_.test.Row(i));
    correct += static_cast<size_t>(std::max_element(y.begin(), y.end()) - y.begin()) ==
               data_.test.labels[i];
  }
  const double want = double(correct) / double(data_.test.num_samples);
  // fp32 in the executor against double here: a near-tie may flip a few images, no more.
  EXPECT_NEAR(accuracy, want, 0.001) << out;
  EXPECT_GT(accuracy, 0.02) << out;
  EXPECT_LT(accuracy, 0.30) << out;
  EXPECT_NE(out.find(" (0 failed)"), std::string::npos) << out;
}

TEST_F(InferenceTest, ManyConnectionsShareBatchesAndEachGetsItsOwnAnswer) {
  DeployJobAndModel("fb", "fedavg", 3);
  const std::vector<float> w = Weights("fb", 0);
  ASSERT_FALSE(w.empty());
  const Json before = Stats("fb");
  constexpr int kConnections = 32, kPerConnection = 8;
  std::atomic<int> failed{0}, wrong{0};
  Threads(kConnections, [&](int t) {
    for (int i = 0; i < kPerConnection; ++i) {
      const int image = t * kPerConnection + i;
      auto r = Infer("fb", ImageRequest(data_.test.Row(image), 1, std::to_string(image)));
      if (r.status != 200) {
        ++failed;
        continue;
      }
      auto j = Json::parse(r.body, nullptr, false);
      const auto expect = Forward(w, data_.test.Row(image));
      if (j["id"] != std::to_string(image)) ++wrong;
      for (int c = 0; c < 10; ++c) {
        if (std::abs(j["outputs"][0]["data"][c].get<float>() - expect[c]) > 1e-4) ++wrong;
      }
    }
  }).Join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const Json after = Stats("fb");
  const uint64_t requests = after["requests"].get<uint64_t>() - before["requests"].get<uint64_t>();
  const uint64_t batches = after["batches"].get<uint64_t>() - before["batches"].get<uint64_t>();
  EXPECT_EQ(requests, uint64_t(kConnections * kPerConnection));
  EXPECT_LT(batches, requests) << after.dump();
  uint64_t shared = 0;
  for (const auto& [rows, count] : after["batch_rows_histogram"].items()) {
    if (std::stoi(rows) > 1) shared += count.get<uint64_t>();
  }
  EXPECT_GT(shared, 0u) << after.dump();
  std::cout << requests << " requests in " << batches << " batches\n";
}

TEST_F(InferenceTest, HotSwapUnderLoadWhileTheJobTrainsZeroFailures) {
  DeployJobAndModel("fh", "fedasync", 12);
  StartClients("fh");
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0}, regressions{0}, answered{0};
  std::mutex mu;
  std::set<uint64_t> versions;
  Threads callers(8, [&](int t) {
    uint64_t last = 0;
    int i = 0;
    while (!stop.load()) {
      auto r = Infer("fh", ImageRequest(data_.test.Row((t * 97 + i++) % 1000), 1, "h"));
      if (r.status != 200) {
        ++failed;
        std::cerr << "failed: " << r.status << " " << r.body << r.error << "\n";
        continue;
      }
      const uint64_t v =
          std::stoull(Json::parse(r.body, nullptr, false)["model_version"].get<std::string>());
      if (v < last) ++regressions;
      last = v;
      ++answered;
      std::lock_guard lock(mu);
      versions.insert(v);
    }
  });
  // Until the job is done (12 versions) or 25 s.
  uint64_t job_version = 0;
  for (int i = 0; i < 250; ++i) {
    auto s = Json::parse(shoald_.Api("GET", "/v1/jobs/fh").body, nullptr, false);
    job_version = s.value("version", uint64_t{0});
    if (s.value("state", "") == "done") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the watcher's last swap
  stop = true;
  callers.Join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(regressions.load(), 0);
  EXPECT_GT(answered.load(), 50);
  EXPECT_GE(job_version, 3u);
  EXPECT_GE(versions.size(), 3u) << "the function should have served several versions";
  const Json stats = Stats("fh");
  std::cout << "hot swap: " << answered.load() << " answers from " << versions.size()
            << " versions, job at version " << job_version << "; " << stats.dump() << "\n";
  EXPECT_GE(stats["swaps"].get<uint64_t>(), 2u);
  EXPECT_EQ(stats["failed_batches"], 0);
  // The newest version is what is served at the end.
  EXPECT_EQ(stats["model_version"], std::to_string(job_version)) << stats.dump();
}

// The function learns of each commit from shoald (a kJobCommitted notice), not from its safety
// poll: with that poll set to an hour, every version the job commits is still served.
TEST_F(InferenceTest, FollowsTheJobByCommitNoticesNotByPolling) {
  auto d = shoald_.Deploy(JobManifest("fn", "fedavg", 3));
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  std::string fn = InferManifest("fn");
  const std::string handler = "  handler: inference\n";
  ASSERT_NE(fn.find(handler), std::string::npos);
  fn.replace(fn.find(handler), handler.size(),
             "  handler: {builtin: inference, env: {SHOAL_INFER_POLL_MS: \"3600000\"}}\n");
  d = shoald_.Deploy(fn);
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  ASSERT_TRUE(shoald_.WaitReady("fn-infer", 1, 20000)) << shoald_.Log();
  StartClients("fn");
  Json job;
  ASSERT_TRUE(WaitFor(
      [&] {
        job = Json::parse(shoald_.Api("GET", "/v1/jobs/fn").body, nullptr, false);
        return job.value("state", "") == "done";
      },
      std::chrono::seconds(60)))
      << job.dump() << shoald_.Log();
  const uint64_t version = job.value("version", uint64_t{0});
  ASSERT_EQ(version, 3u) << job.dump();
  Json stats;
  ASSERT_TRUE(WaitFor(
      [&] {
        stats = Stats("fn");
        return stats.value("model_version", "") == std::to_string(version);
      },
      std::chrono::seconds(10)))
      << stats.dump() << shoald_.Log();
  // Notices that come while a version loads make one more load: at least one swap, from the
  // version the instance started with.
  EXPECT_GE(stats["swaps"].get<uint64_t>(), 1u) << stats.dump();
  EXPECT_EQ(stats["failed_batches"], 0);
  const std::vector<float> w = Weights("fn", version);
  const float* x = data_.test.Row(7);
  auto r = Infer("fn", ImageRequest(x, 1, "n"));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json out = Json::parse(r.body, nullptr, false)["outputs"][0]["data"];
  const std::vector<float> want = Forward(w, x);
  ASSERT_EQ(out.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c) EXPECT_NEAR(out[c].get<float>(), want[c], 1e-4) << c;
}

TEST_F(InferenceTest, OnnxSourceAnswersLikePyTorch) {
  // The CNN and its reference outputs that tests/data/inference/gen_refs.py wrote with PyTorch.
  const std::string dir = std::string(SHOAL_SOURCE_DIR) + "/tests/data/inference/";
  auto d = shoald_.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: cnn}\nspec:\n"
      "  handler: inference\n  concurrency: 4\n  inference:\n    source: {onnx: " +
      dir + "cnn.onnx}\n    device: cpu\n    maxBatchSize: 4\n");
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  auto meta_r = Http(shoald_.port(), "GET", "/v2/models/cnn");
  ASSERT_EQ(meta_r.status, 200) << meta_r.body << shoald_.Log();
  const Json meta = Json::parse(meta_r.body, nullptr, false);
  EXPECT_EQ(meta["platform"], "onnx");
  EXPECT_EQ(meta["versions"], Json::array({"1"}));
  EXPECT_EQ(meta["inputs"][0]["shape"], Json::array({-1, 1, 28, 28}));
  EXPECT_EQ(meta["outputs"][0]["shape"], Json::array({-1, 10}));
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string input = read(dir + "cnn.input.bin"), expect = read(dir + "cnn.output.bin");
  ASSERT_EQ(input.size(), 3u * 784 * 4);
  ASSERT_EQ(expect.size(), 3u * 10 * 4);
  const Json header = {
      {"inputs",
       {{{"name", meta["inputs"][0]["name"]},
         {"shape", {3, 1, 28, 28}},
         {"datatype", "FP32"},
         {"parameters", {{"binary_data_size", input.size()}}}}}},
      {"outputs",
       {{{"name", meta["outputs"][0]["name"]}, {"parameters", {{"binary_data", true}}}}}}};
  const std::string h = header.dump();
  auto r = Infer("cnn", h + input,
                 {"Content-Type: application/octet-stream",
                  "Inference-Header-Content-Length: " + std::to_string(h.size())});
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t jl = std::stoul(r.headers["inference-header-content-length"]);
  ASSERT_EQ(r.body.size(), jl + expect.size());
  for (size_t i = 0; i < 30; ++i) {
    float got, want;
    std::memcpy(&got, r.body.data() + jl + i * 4, 4);
    std::memcpy(&want, expect.data() + i * 4, 4);
    EXPECT_NEAR(got, want, 1e-4) << "output " << i;
  }
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"cnn\",path=\"spawn\""), 0)
      << shoald_.Log();
}

// A digits job's model (8x8 images: 64 inputs) served from the FL job: the handler takes the
// input width from the job status's "model" object (it used to assume Fashion-MNIST's 784 and
// failed to load). The metadata says [-1, 64] and the answer equals the MLP computed here.
class InferenceDigitsTest : public ShoaldDataTest {
 protected:
  InferenceDigitsTest() : ShoaldDataTest(TestData::kDigits, /*check_hugepages=*/false) {}
};

TEST_F(InferenceDigitsTest, FlJobOnDigitsServes64Inputs) {
  ASSERT_EQ(data_.test.num_features, 64u);
  constexpr uint32_t kDigitsHidden = 16;
  auto d = shoald_.Deploy(
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: dg\nspec:\n"
      "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 16, seed: 7}\n"
      "  data: {dataset: digits}\n  clients: {expected: 2}\n  stop: {rounds: 3}\n"
      "  training: {localSteps: 2, learningRate: 0.1, batchSize: 32}\n"
      "  aggregation: {maxFanIn: 2, maxLeaves: 1}\n");
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  d = shoald_.Deploy(InferManifest("dg"));
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  ASSERT_TRUE(shoald_.WaitReady("dg-infer", 1, 20000)) << shoald_.Log();

  auto status = Json::parse(shoald_.Api("GET", "/v1/jobs/dg").body, nullptr, false);
  ASSERT_EQ(status["model"]["inputs"], 64) << status.dump();
  // Ready once loaded: wait for the first version to be compiled.
  for (int i = 0; i < 200 && Http(shoald_.port(), "GET", "/v2/models/dg/ready").status != 200;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto meta_r = Http(shoald_.port(), "GET", "/v2/models/dg");
  ASSERT_EQ(meta_r.status, 200) << meta_r.body << shoald_.Log();
  auto meta = Json::parse(meta_r.body, nullptr, false);
  EXPECT_EQ(meta["inputs"][0]["shape"], Json::array({-1, 64})) << meta.dump();
  EXPECT_EQ(meta["outputs"][0]["shape"], Json::array({-1, 10})) << meta.dump();

  // The served version's weights, and the MLP over one test image computed from them.
  const std::vector<float> w = ModelOf("dg", 0, model::MlpSpec(64, {kDigitsHidden}, 10));
  ASSERT_FALSE(w.empty());
  const float* x = data_.test.Row(0);
  const std::vector<float> expect = Forward(w, x, 64, kDigitsHidden);
  Json req = {{"inputs",
               {{{"name", "input"},
                 {"shape", {1, 64}},
                 {"datatype", "FP32"},
                 {"data", std::vector<float>(x, x + 64)}}}}};
  auto a = Http(shoald_.port(), "POST", "/v2/models/dg/infer", req.dump(),
                {"Content-Type: application/json"});
  ASSERT_EQ(a.status, 200) << a.body;
  auto j = Json::parse(a.body, nullptr, false);
  EXPECT_EQ(j["model_version"], "0");
  EXPECT_EQ(j["outputs"][0]["shape"], Json::array({1, 10}));
  ASSERT_EQ(j["outputs"][0]["data"].size(), 10u) << a.body;
  for (int c = 0; c < 10; ++c) {
    EXPECT_NEAR(j["outputs"][0]["data"][c].get<float>(), expect[c], 1e-4) << "class " << c;
  }
  // A 784-wide input is refused naming the shape.
  auto wrong = Http(shoald_.port(), "POST", "/v2/models/dg/infer",
                    R"({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[0]}]})",
                    {"Content-Type: application/json"});
  EXPECT_EQ(wrong.status, 400) << wrong.body;
}

}  // namespace
}  // namespace shoal::testing
