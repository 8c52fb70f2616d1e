// bench-train: local-training throughput (samples/s) of the client's MLP trainer, MLP 784-128-10,
// batch 32, plain SGD on Fashion-MNIST, one thread, against the same model and optimiser in the
// project venv's peers (bench/train_anchor.py), measured in the same run:
//   - torch 2 eager (training mode, SGD fused=True) and torch 2 with the whole step under
//     torch.compile (inductor), each on torch.set_num_threads(1) (MKL + oneDNN, linked in torch);
//   - numpy 2 on its bundled OpenBLAS, one thread.
// Each anchor is one process per run with OpenBLAS's own CPU detection and one thread for every
// BLAS and OpenMP runtime (bench/openblas_env.h); each names its version, mode and the BLAS it ran
// on (bench/anchor_blas.py), printed in the table. A run is Shoal's trainer then each anchor, so
// load on the machine hits them alike; --runs runs. The stronger anchor is the one with the
// higher median; the ratio's min/median/max pair each run of Shoal with the same run of it.
//
//   bench-train [--data DIR (Fashion-MNIST)] [--steps N (3000)] [--runs R (3)] [--no-compile]
//
// Last line: RESULT train ratio=<median over runs of Shoal samples/s / the stronger anchor's>.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_args.h"
#include "openblas_env.h"
#include "project_python.h"
#include "run_stats.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoal/tools/flsim/mlp_trainer.h"

using namespace shoal::client;

namespace {

constexpr int kBatch = 32, kHidden = 128;

struct Run {
  double samples_per_s = 0;
  double test_acc = 0;
  std::string peer;
};

struct Anchor {
  std::string name, framework, mode;
  std::vector<Run> runs;
  std::string why;  // set when a run failed: the anchor is left out
};

// One anchor process: one timed training of `steps` steps.
Run RunAnchor(Anchor& a, const std::string& dir, int steps) {
  const std::string cmd = shoal::bench::OpenBlasAnchorEnv(1) + shoal::bench::ProjectPython() +
                          " " SHOAL_TRAIN_ANCHOR " --framework " + a.framework + " --mode " +
                          a.mode + " --data '" + dir + "' --steps " + std::to_string(steps) +
                          " --batch " + std::to_string(kBatch) + " --hidden " +
                          std::to_string(kHidden) + " --threads 1";
  if (a.runs.empty()) std::fprintf(stderr, "bench-train: anchor: %s\n", cmd.c_str());
  Run run;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    a.why = "cannot start " + shoal::bench::ProjectPython();
    return run;
  }
  char line[2048] = {}, text[1536] = {};
  bool ok = false;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (std::sscanf(line, "samples_per_s=%lf test_acc=%lf peer=%1535[^\n]", &run.samples_per_s,
                    &run.test_acc, text) == 3) {
      run.peer = text;
      ok = true;
    } else if (std::sscanf(line, "SKIP reason=%1535[^\n]", text) == 1) {
      a.why = text;
    }
  }
  if (pclose(p) != 0 || !ok) {
    if (a.why.empty()) a.why = "the anchor failed (stderr above)";
    return Run{};
  }
  return run;
}

std::vector<double> Rates(const std::vector<Run>& runs) {
  std::vector<double> v;
  for (const Run& r : runs) v.push_back(r.samples_per_s);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = kFashionMnistDir;
  int steps = 3000, runs = 3;
  bool compile = true;
  shoal::bench::Args args(
      "bench-train [--data DIR] [--steps N (3000)] [--runs R (3)] [--no-compile]");
  args.Option("--data", &dir).Option("--steps", &steps).Option("--runs", &runs);
  args.Switch("--no-compile", &compile, false);
  if (!args.Parse(argc, argv)) return 2;
  if (steps < 1 || runs < 1) {
    args.Usage();
    return 2;
  }
  auto split = LoadFashionMnist(dir);
  if (!split.ok()) {
    std::fprintf(stderr, "bench-train: %s\n", split.status().ToString().c_str());
    return 1;
  }
  const MlpShape shape{784, kHidden, 10};

  std::vector<Anchor> anchors = {{"torch eager", "torch", "eager", {}, {}},
                                 {"torch compiled", "torch", "compiled", {}, {}},
                                 {"numpy", "numpy", "eager", {}, {}}};
  if (!compile) anchors.erase(anchors.begin() + 1);
  std::vector<Run> shoal;
  for (int r = 0; r < runs; ++r) {
    auto params = InitMlpParams(shape, 1);
    MlpTrainer trainer(shape, {0.1F, kBatch}, 1);
    if (!trainer.Train(params, split->train, {}, 50).ok()) return 1;  // warm-up, as the anchors'
    const auto t0 = std::chrono::steady_clock::now();
    auto stats = trainer.Train(params, split->train, {}, steps);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats.ok()) return 1;
    shoal.push_back({steps * kBatch / s, Evaluate(shape, params, split->test)->accuracy, ""});
    for (Anchor& a : anchors) {
      if (!a.why.empty()) continue;
      Run run = RunAnchor(a, dir, steps);
      if (a.why.empty()) a.runs.push_back(run);
    }
    std::fprintf(stderr, "bench-train: run %d of %d done\n", r + 1, runs);
  }

  std::printf(
      "bench-train: MLP 784-%d-10, batch %d, SGD lr 0.1, %d steps, Fashion-MNIST, 1 thread, %d "
      "runs (Shoal, then each anchor, per run)\n",
      kHidden, kBatch, steps, runs);
  std::printf("%-16s %26s %9s  %s\n", "trainer", "samples/s min/med/max", "test acc",
              "peer (version, mode, BLAS)");
  auto row = [](const char* name, const std::vector<Run>& v, const std::string& peer) {
    const shoal::bench::Spread s = shoal::bench::SpreadOf(Rates(v));
    char rates[64];
    std::snprintf(rates, sizeof rates, "%.0f/%.0f/%.0f", s.min, s.median, s.max);
    std::printf("%-16s %26s %9.4f  %s\n", name, rates, v.back().test_acc, peer.c_str());
  };
  row("shoal", shoal, "MlpTrainer, own kernels");
  const Anchor* stronger = nullptr;
  for (const Anchor& a : anchors) {
    if (!a.why.empty()) {
      std::printf("%-16s %26s %9s  not measured: %s\n", a.name.c_str(), "-", "-", a.why.c_str());
      continue;
    }
    row(a.name.c_str(), a.runs, a.runs.back().peer);
    if (!stronger ||
        shoal::bench::Median(Rates(a.runs)) > shoal::bench::Median(Rates(stronger->runs))) {
      stronger = &a;
    }
  }
  if (stronger == nullptr) {
    std::fprintf(stderr, "bench-train: no anchor ran\n");
    return 1;
  }
  std::vector<double> ratios;
  for (int r = 0; r < runs; ++r) {
    ratios.push_back(shoal[r].samples_per_s / stronger->runs[r].samples_per_s);
  }
  const shoal::bench::Spread q = shoal::bench::SpreadOf(ratios);
  std::printf(
      "ratio = shoal / stronger anchor (%s, the higher median) per run, min/median/max = "
      "%.2f/%.2f/%.2f (higher is better)\n",
      stronger->name.c_str(), q.min, q.median, q.max);
  std::printf("RESULT train ratio=%.2f\n", q.median);
  return 0;
}
