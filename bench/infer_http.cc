// bench-infer-http: the FL demo's model (784-128-10 MLP) served end to end over the Open
// Inference Protocol (wrk, many connections, one Fashion-MNIST image per request, JSON and the
// binary-data extension) with dynamic batching, and without it (maxBatchSize 1), against the
// same CPU executor run alone in this process in the same run: batch-1 calls (what a server
// without batching can at best do) and full batches (the ceiling batching can reach). The
// executor runs on one thread everywhere (spec.inference.threads: 1): for a model this small
// more threads cost more in synchronisation than they save, and the gateway needs the cores.
// RESULT ratio = end-to-end images/s with batching / executor-alone batch-1 images/s.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/serving/executor/executor.h"
#include "shoal/serving/graph/architectures_graph.h"
#include "shoal/tools/flsim/dataset.h"
#include "tests/support/shoald_fixture.h"
#include "wrk_runner.h"

using namespace shoal;
using namespace shoal::testing;
using shoal::bench::RunWrk;
using shoal::bench::WrkResult;

namespace {

struct ExecResult {
  double images_per_s = 0, p50_ms = 0, p99_ms = 0;
};

// The executor alone: `batch` images per Run() for `secs`, one caller (as the batcher calls it).
ExecResult RunExecutor(inference::Executable& exe, const std::vector<float>& image, int batch,
                       double secs) {
  std::vector<float> in(static_cast<size_t>(batch) * 784), out(static_cast<size_t>(batch) * 10);
  for (int b = 0; b < batch; ++b) std::copy(image.begin(), image.end(), in.begin() + b * 784);
  std::vector<double> lat;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t images = 0;
  for (;;) {
    const auto t = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(t - t0).count() >= secs) break;
    if (!exe.Run({in, out, batch}).ok()) break;
    lat.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
    images += static_cast<uint64_t>(batch);
  }
  ExecResult r;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.images_per_s = double(images) / elapsed;
  std::sort(lat.begin(), lat.end());
  if (!lat.empty()) {
    r.p50_ms = lat[lat.size() / 2];
    r.p99_ms = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  }
  return r;
}

std::string InferFunction(const std::string& name, int max_batch, const std::string& delay) {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: " + name +
         "}\nspec:\n  handler: inference\n  concurrency: 256\n  scale: {min: 1, max: 1}\n"
         "  inference:\n    source: {flJob: bench}\n    device: cpu\n    threads: 1\n    "
         "maxBatchSize: " +
         std::to_string(max_batch) + "\n    maxQueueDelay: " + delay + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  int secs = 5, conns = 64, max_batch = 32;
  shoal::bench::Args args("bench-infer-http [--seconds S] [--connections C] [--max-batch B]");
  args.Option("--seconds", &secs).Option("--connections", &conns).Option("--max-batch", &max_batch);
  if (!args.Parse(argc, argv)) return 2;
  if (!shoal::bench::WrkInstalled("bench-infer-http", "infer-http")) return 1;
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  char tmpl[] = "/tmp/shoal-bench-infer-XXXXXX";
  const std::string dir = mkdtemp(tmpl);

  // One real test image (or a synthetic one when the dataset is not installed).
  std::vector<float> image(784, 0.5f);
  std::string image_from = "synthetic";
  if (auto data = client::LoadFashionMnist(); data.ok()) {
    image.assign(data->test.Row(0), data->test.Row(0) + 784);
    image_from = "Fashion-MNIST test[0]";
  }
  std::string json = R"({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[)";
  for (int i = 0; i < 784; ++i) {
    char b[24];
    std::snprintf(b, sizeof b, i ? ",%.6g" : "%.6g", image[i]);
    json += b;
  }
  json += "]}]}";
  const std::string header =
      R"({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","parameters":{"binary_data_size":3136}}],)"
      R"("outputs":[{"name":"logits","parameters":{"binary_data":true}}]})";
  std::ofstream(dir + "/json.body", std::ios::binary) << json;
  {
    std::ofstream f(dir + "/binary.body", std::ios::binary);
    f << header;
    f.write(reinterpret_cast<const char*>(image.data()), 784 * sizeof(float));
  }
  auto script = [&](const std::string& name, const std::string& headers) {
    const std::string path = dir + "/" + name + ".lua";
    std::ofstream(path) << "local f = io.open(\"" << dir << "/" << name
                        << ".body\", \"rb\")\nwrk.body = f:read(\"*all\")\nf:close()\n"
                        << "wrk.method = \"POST\"\n"
                        << headers;
    return path;
  };
  const std::string json_lua =
      script("json", "wrk.headers[\"Content-Type\"] = \"application/json\"\n");
  const std::string bin_lua =
      script("binary",
             "wrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n"
             "wrk.headers[\"Inference-Header-Content-Length\"] = \"" +
                 std::to_string(header.size()) + "\"\n");

  std::fprintf(stderr,
               "[1/4] starting shoald (%d event loops), an FL job and two inference functions\n",
               workers);
  Shoald shoald;
  if (!shoal::bench::StartShoald(shoald, workers)) return 1;
  auto d = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata: {name: bench}\nspec:\n"
      "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 128}\n"
      "  clients: {expected: 1}\n  stop: {rounds: 1}\n");
  if (d.exit_code != 0) {
    std::fprintf(stderr, "FL job deploy failed: %s%s\n", d.err.c_str(), d.out.c_str());
    return 1;
  }
  const std::string delay = "2ms";
  d = shoald.Deploy(InferFunction("batched", max_batch, delay));
  auto d1 = shoald.Deploy(InferFunction("unbatched", 1, "0"));
  if (d.exit_code != 0 || d1.exit_code != 0 || !shoald.WaitReady("batched", 1, 20000) ||
      !shoald.WaitReady("unbatched", 1, 20000)) {
    std::fprintf(stderr, "inference deploy failed: %s%s\n%s", d.err.c_str(), d1.err.c_str(),
                 shoald.Log().c_str());
    return 1;
  }
  const int wrk_threads = std::max(1, workers);
  std::fprintf(stderr, "[2/4] wrk -t%d -c%d -d%ds: batched (max %d, %s), JSON and binary\n",
               wrk_threads, conns, secs, max_batch, delay.c_str());
  RunWrk(shoald.port(), "/v2/models/batched/infer", wrk_threads, conns, 1, json_lua);  // warm-up
  WrkResult bj =
      RunWrk(shoald.port(), "/v2/models/batched/infer", wrk_threads, conns, secs, json_lua);
  WrkResult bb =
      RunWrk(shoald.port(), "/v2/models/batched/infer", wrk_threads, conns, secs, bin_lua);
  const std::string stats = Http(shoald.port(), "GET", "/v2/models/batched/stats").body;
  std::fprintf(stderr, "[3/4] the same against maxBatchSize 1 (no batching)\n");
  RunWrk(shoald.port(), "/v2/models/unbatched/infer", wrk_threads, conns, 1, bin_lua);
  WrkResult ub =
      RunWrk(shoald.port(), "/v2/models/unbatched/infer", wrk_threads, conns, secs, bin_lua);

  // The same model and weights (version 0), compiled here.
  std::fprintf(stderr, "[4/4] the CPU executor alone, in this process\n");
  auto model_r = shoald.Api("GET", "/v1/jobs/bench/model?version=0");
  shoald.Stop();
  auto model = model::ModelFromSafetensors(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(model_r.body.data()),
                                 model_r.body.size()),
      model::MlpSpec(784, {128}, 10));
  if (!model.ok()) {
    std::fprintf(stderr, "model download: %s\n", model.status().ToString().c_str());
    return 1;
  }
  inference::Graph g = inference::MlpGraph(784, {128}, 10);
  std::map<std::string, std::vector<float>, std::less<>> w;
  for (size_t i = 0; i < model->spec.size(); ++i) {
    auto t = model->tensor(i);
    w.emplace(model->spec.tensor(i).name, std::vector<float>(t.begin(), t.end()));
  }
  auto executor = inference::CreateExecutor("cpu");
  if (!executor.ok() || !g.Validate().ok() || !g.SetWeights(w).ok()) {
    std::fprintf(stderr, "executor: cannot build\n");
    return 1;
  }
  inference::ExecutorOptions eo;
  eo.max_batch = max_batch;
  eo.threads = 1;  // as the functions run it (spec.inference.threads: 1)
  auto exe = (*executor)->Compile(g, eo);
  if (!exe.ok()) {
    std::fprintf(stderr, "compile: %s\n", exe.status().ToString().c_str());
    return 1;
  }
  RunExecutor(**exe, image, 1, 0.5);  // warm-up
  const ExecResult e1 = RunExecutor(**exe, image, 1, secs);
  const ExecResult eb = RunExecutor(**exe, image, max_batch, secs);

  const double ratio = e1.images_per_s > 0 ? bb.rps / e1.images_per_s : 0;
  std::printf(
      "bench-infer-http: MLP 784-128-10 (the FL demo's model), 1 image (%s) per request, "
      "wrk -t%d -c%d -d%ds, %d server loops, CPU executor (oneDNN), same run\n",
      image_from.c_str(), wrk_threads, conns, secs, workers);
  std::printf("%-46s %12s %10s %10s %8s\n", "what", "images/s", "p50 ms", "p99 ms", "errors");
  // The executor's rows: images/s over the whole run (what a server gets, interference from
  // other processes included) and, in the p50 column, one call's median time.
  std::printf("%-46s %12.0f %10.3f %10.3f %8ld\n", "OIP/HTTP JSON, dynamic batching", bj.rps,
              bj.p50_ms, bj.p99_ms, bj.errors);
  std::printf("%-46s %12.0f %10.3f %10.3f %8ld\n", "OIP/HTTP binary ext., dynamic batching", bb.rps,
              bb.p50_ms, bb.p99_ms, bb.errors);
  std::printf("%-46s %12.0f %10.3f %10.3f %8ld\n", "OIP/HTTP binary ext., maxBatchSize 1", ub.rps,
              ub.p50_ms, ub.p99_ms, ub.errors);
  std::printf("%-46s %12.0f %10.3f %10.3f %8s\n", "executor alone, batch 1 (anchor)",
              e1.images_per_s, e1.p50_ms, e1.p99_ms, "-");
  char label[64];
  std::snprintf(label, sizeof label, "executor alone, batch %d (ceiling)", max_batch);
  std::printf("%-46s %12.0f %10.3f %10.3f %8s\n", label, eb.images_per_s, eb.p50_ms, eb.p99_ms,
              "-");
  std::printf("batcher stats after the batched runs: %s", stats.c_str());
  std::printf(
      "ratio end-to-end batched binary / executor alone batch 1 = %.3f (1 = HTTP, OIP "
      "parsing and batching cost nothing)\n",
      ratio);
  std::printf("ratio end-to-end batched / unbatched (maxBatchSize 1) = %.3f\n",
              ub.rps > 0 ? bb.rps / ub.rps : 0);
  std::printf("ratio end-to-end batched binary / executor alone batch %d = %.3f\n", max_batch,
              eb.images_per_s > 0 ? bb.rps / eb.images_per_s : 0);
  std::printf("RESULT infer-http ratio=%.3f\n", ratio);
  return 0;
}
