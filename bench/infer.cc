// bench-infer: an executor's batch-1 latency (p50, p99 over --iters single-sample runs) and
// large-batch throughput (median of --large-iters runs) on the FL demo's MLP (784-128-10) or
// ResNet-18 (torchvision layout, BN folded at load, 3x224x224 unless --image), against stock
// tools on the same device measured in the same run by bench/infer_anchor.py: torch eager, and
// on CUDA torch's CUDA-graph replay and torch.compile max-autotune (--compile), plus
// onnxruntime when installed, and for the MLP on the CPU the same forward in numpy (two BLAS
// products into preallocated arrays). The anchors run on OpenBLAS (bench/openblas_env.h:
// libblas.so.3 from Debian's openblas-pthread directory, OpenBLAS's own CPU detection,
// OPENBLAS_NUM_THREADS =
// --threads); each CPU anchor's note says which BLAS it mapped. Ratios: latency = best anchor p50 /
// shoal p50, throughput = shoal / best anchor (higher is better for both); RESULT is the smaller of
// the two. Without torch the anchor rows say why and RESULT is nan.
//
//   bench-infer [--executor cpu|cuda|auto] [--model mlp|resnet18] [--precision fp32|fp16|bf16]
//               [--batch N] [--iters N] [--large-iters N] [--image N] [--threads N]
//               [--compile] [--no-anchor] [--python PATH]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "openblas_env.h"
#include "project_python.h"
#include "shoal/inference/architectures_graph.h"
#include "shoal/inference/executor.h"

namespace {

using namespace shoal::inference;
using shoal::Status;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string executor = "cpu", model = "mlp", precision = "fp32", python;
  int64_t batch = 0, image = 224;
  int iters = 0, large_iters = 0, threads = 0;
  bool compile = false, anchor = true;
};

struct Row {
  std::string what;
  double p50_ms = NAN, p99_ms = NAN, throughput = NAN;
  std::string note;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Graph BuildGraph(const Options& o) {
  if (o.model == "mlp") {
    Graph g = MlpGraph(784, {128}, 10);
    uint32_t s = 12345;  // weights the size of a trained model's, values irrelevant to speed
    for (auto& [name, init] : g.initializers) {
      for (float& x : init.floats) {
        s = s * 1664525u + 1013904223u;
        x = static_cast<float>(static_cast<int32_t>(s)) * 0x1p-36f;
      }
    }
    return g;
  }
  return ResNetGraph({.image = o.image});
}

// The first python that imports torch: --python, else the project's (ProjectPython()).
std::string FindPython(const Options& o) {
  std::vector<std::string> c;
  if (!o.python.empty()) c.push_back(o.python);
  c.push_back(shoal::bench::ProjectPython());
  for (const std::string& p : c) {
    if (std::system((p + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return p;
  }
  return {};
}

std::vector<Row> RunAnchor(const Options& o, const std::string& device, std::string* why) {
  std::vector<Row> rows;
  const std::string py = FindPython(o);
  if (py.empty()) {
    *why = "torch is not installed for " + shoal::bench::ProjectPython() + " (scripts/lib.sh makes the venv)";
    return rows;
  }
  // OpenBLAS for torch's and numpy's CPU matrix products, on the executor's thread count.
  std::string cmd = shoal::bench::OpenBlasAnchorEnv(o.threads) + py +
                    " " SHOAL_INFER_ANCHOR_PY " --model " + o.model + " --device " + device +
                    " --precision " + o.precision + " --batch " + std::to_string(o.batch) +
                    " --image " + std::to_string(o.image) + " --iters " + std::to_string(o.iters) +
                    " --large-iters " + std::to_string(o.large_iters) + " --threads " +
                    std::to_string(o.threads) + (o.compile ? " --compile" : "") + " 2>/dev/null";
  std::fprintf(stderr, "bench-infer: anchor: %s\n", cmd.c_str());
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *why = "cannot start " + py;
    return rows;
  }
  char line[1024];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    char name[128] = {}, note[512] = {};
    Row r;
    if (std::sscanf(line, "ANCHOR %127s bs1_p50_ms=%lf bs1_p99_ms=%lf throughput=%lf note=%511[^\n]",
                    name, &r.p50_ms, &r.p99_ms, &r.throughput, note) >= 4) {
      r.what = std::string(name) + " (anchor)";
      r.note = note;
      rows.push_back(r);
    } else if (std::sscanf(line, "SKIP %127s reason=%511[^\n]", name, note) == 2) {
      r.what = std::string(name) + " (anchor)";
      r.note = std::string("not measured: ") + note;
      rows.push_back(r);
    }
  }
  if (pclose(p) != 0 && rows.empty()) *why = "the anchor script failed";
  return rows;
}

int Usage() {
  std::fprintf(stderr,
               "usage: bench-infer [--executor cpu|cuda|auto] [--model mlp|resnet18] "
               "[--precision fp32|fp16|bf16] [--batch N] [--iters N] [--large-iters N] "
               "[--image N] [--threads N] [--compile] [--no-anchor] [--python PATH]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto num = [&] { return std::strtoll(argv[++i], nullptr, 10); };
    if (a == "--executor" && v) o.executor = argv[++i];
    else if (a == "--model" && v) o.model = argv[++i];
    else if (a == "--precision" && v) o.precision = argv[++i];
    else if (a == "--python" && v) o.python = argv[++i];
    else if (a == "--batch" && v) o.batch = num();
    else if (a == "--image" && v) o.image = num();
    else if (a == "--iters" && v) o.iters = static_cast<int>(num());
    else if (a == "--large-iters" && v) o.large_iters = static_cast<int>(num());
    else if (a == "--threads" && v) o.threads = static_cast<int>(num());
    else if (a == "--compile") o.compile = true;
    else if (a == "--no-anchor") o.anchor = false;
    else return Usage();
  }
  if (o.model != "mlp" && o.model != "resnet18") return Usage();
  const std::map<std::string, Precision> precisions = {
      {"fp32", Precision::kF32}, {"fp16", Precision::kF16}, {"bf16", Precision::kBF16}};
  if (precisions.count(o.precision) == 0) return Usage();

  auto executor = CreateExecutor(o.executor);
  if (!executor.ok()) {
    std::fprintf(stderr, "bench-infer: %s\n", executor.status().ToString().c_str());
    return 1;
  }
  const std::string device((*executor)->name());
  const bool resnet = o.model == "resnet18";
  // Defaults sized so a CPU run finishes in about a minute; a GPU takes the sizes.
  if (o.batch <= 0) o.batch = resnet ? (device == "cuda" ? 256 : 16) : 4096;
  if (o.iters <= 0) o.iters = resnet ? (device == "cuda" ? 200 : 20) : 2000;
  if (o.large_iters <= 0) o.large_iters = resnet ? (device == "cuda" ? 20 : 3) : 20;
  if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  Graph g = BuildGraph(o);
  for (Status s : {g.Validate(), FoldBatchNorm(g)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "bench-infer: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const auto t0 = Clock::now();
  auto exe = (*executor)->Compile(
      g, {.precision = precisions.at(o.precision), .max_batch = o.batch, .threads = o.threads});
  if (!exe.ok()) {
    std::fprintf(stderr, "bench-infer: compile: %s\n", exe.status().ToString().c_str());
    return 1;
  }
  const double compile_s = Seconds(t0, Clock::now());
  int64_t in_per = 1, out_per = 1;
  for (int64_t d : (*exe)->input_shape()) in_per *= d;
  for (int64_t d : (*exe)->output_shape()) out_per *= d;
  std::vector<float> in(static_cast<size_t>(in_per * o.batch)), out(static_cast<size_t>(out_per * o.batch));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 255) / 255.0f;

  auto run = [&](int64_t batch) {
    const Status s = (*exe)->Run({std::span<const float>(in).first(static_cast<size_t>(batch * in_per)),
                                  std::span<float>(out).first(static_cast<size_t>(batch * out_per)),
                                  batch});
    if (!s.ok()) {
      std::fprintf(stderr, "bench-infer: run: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  };
  auto timed = [&](int64_t batch, int iters) {
    run(batch);
    run(batch);
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      const auto a = Clock::now();
      run(batch);
      t.push_back(Seconds(a, Clock::now()));
    }
    std::sort(t.begin(), t.end());
    return std::make_pair(t[t.size() / 2], t[std::min(t.size() - 1, t.size() * 99 / 100)]);
  };
  std::fprintf(stderr, "bench-infer: shoal %s %s: compiled in %.2f s; batch 1 x %d\n",
               device.c_str(), o.precision.c_str(), compile_s, o.iters);
  const auto [p50, p99] = timed(1, o.iters);
  std::fprintf(stderr, "bench-infer: batch %lld x %d\n", static_cast<long long>(o.batch),
               o.large_iters);
  const double big = timed(o.batch, o.large_iters).first;
  Row mine{"shoal " + device + " " + o.precision, p50 * 1e3, p99 * 1e3, o.batch / big,
           "compile " + std::to_string(static_cast<int>(compile_s * 1e3)) + " ms"};

  std::string why = "--no-anchor";
  std::vector<Row> anchors;
  if (o.anchor) anchors = RunAnchor(o, device, &why);

  const char* unit = resnet ? "img/s" : "samples/s";
  std::printf("bench-infer: %s (%s), executor %s, %s, large batch %lld, %d threads\n",
              o.model.c_str(), resnet ? ("3x" + std::to_string(o.image) + "x" + std::to_string(o.image)).c_str() : "784-128-10",
              device.c_str(), o.precision.c_str(), static_cast<long long>(o.batch), o.threads);
  std::printf("%-34s %12s %12s %14s  %s\n", "what", "bs1 p50 ms", "bs1 p99 ms", unit, "note");
  auto print = [](const Row& r) {
    auto f = [](double v, const char* fmt) {
      char b[32];
      if (std::isnan(v)) return std::string("-");
      std::snprintf(b, sizeof b, fmt, v);
      return std::string(b);
    };
    std::printf("%-34s %12s %12s %14s  %s\n", r.what.c_str(), f(r.p50_ms, "%.4f").c_str(),
                f(r.p99_ms, "%.4f").c_str(), f(r.throughput, "%.1f").c_str(), r.note.c_str());
  };
  print(mine);
  double best_p50 = NAN, best_tput = NAN;
  for (const Row& r : anchors) {
    print(r);
    if (!std::isnan(r.p50_ms) && !(r.p50_ms >= best_p50)) best_p50 = r.p50_ms;
    if (!std::isnan(r.throughput) && !(r.throughput <= best_tput)) best_tput = r.throughput;
  }
  if (anchors.empty()) std::printf("%-34s %12s %12s %14s  %s\n", "anchor", "-", "-", "-", why.c_str());
  for (const Row& r : anchors) {
    if (r.note.find("BLAS: ") != std::string::npos &&
        r.note.find("BLAS: OpenBLAS") == std::string::npos) {
      std::printf("WARNING: %s did not run on OpenBLAS (Debian package libopenblas0-pthread)\n",
                  r.what.c_str());
    }
  }
  const double lat_ratio = best_p50 / mine.p50_ms, tput_ratio = mine.throughput / best_tput;
  std::printf("ratio latency = best anchor bs1 p50 / shoal = %.3f; throughput = shoal / best "
              "anchor = %.3f (higher is better)\n",
              lat_ratio, tput_ratio);
  if (std::isnan(lat_ratio) || std::isnan(tput_ratio)) {
    std::printf("no anchor measured: the ratio is against nothing\n");
  }
  std::printf("RESULT infer ratio=%.3f\n", std::min(lat_ratio, tput_ratio));
  return 0;
}
