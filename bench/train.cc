// bench-train: local-training throughput (samples/s) of the client's MLP trainer, MLP 784-128-10,
// batch 32, plain SGD on Fashion-MNIST, one thread, against the same model and optimiser in
// numpy and in torch (bench/train_anchor.py, the project venv's Python) measured in the same run, each on
// OpenBLAS with one thread (bench/openblas_env.h: libblas.so.3 from Debian's openblas-pthread
// directory whatever the alternatives say, OpenBLAS's own CPU detection), and each reports the
// BLAS it actually mapped (printed in the table). Best of three runs on each side.
// Last line: RESULT train ratio=<shoal samples/s / the stronger anchor's samples/s>.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "openblas_env.h"
#include "project_python.h"
#include "shoal/client/dataset.h"
#include "shoal/client/mlp_trainer.h"

using namespace shoal::client;

namespace {

struct Figure {
  double samples_per_s = 0;
  double test_acc = 0;
  std::string blas, why;
};

// Runs one anchor `repeats` times and keeps its best run.
Figure RunAnchor(const std::string& framework, const std::string& dir, int steps, int batch,
                 int hidden, int repeats) {
  Figure best;
  const std::string cmd =
      shoal::bench::OpenBlasAnchorEnv(1) + shoal::bench::ProjectPython() + " " SHOAL_TRAIN_ANCHOR " --framework " +
      framework + " --data '" + dir + "' --steps " + std::to_string(steps) + " --batch " +
      std::to_string(batch) + " --hidden " + std::to_string(hidden) + " --threads 1";
  std::fprintf(stderr, "bench-train: anchor: %s\n", cmd.c_str());
  for (int r = 0; r < repeats; ++r) {
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      best.why = "cannot start " + shoal::bench::ProjectPython();
      return best;
    }
    char line[1024] = {}, blas[768] = {};
    Figure f;
    bool ok = false;
    while (std::fgets(line, sizeof line, p) != nullptr) {
      if (std::sscanf(line, "samples_per_s=%lf test_acc=%lf blas=%767[^\n]", &f.samples_per_s,
                      &f.test_acc, blas) == 3) {
        f.blas = blas;
        ok = true;
      } else if (std::sscanf(line, "SKIP reason=%767[^\n]", blas) == 1) {
        best.why = blas;
      }
    }
    if (pclose(p) != 0 || !ok) {
      if (best.why.empty()) best.why = "the anchor failed (needs numpy and torch in " + shoal::bench::ProjectPython() + ")";
      return best;
    }
    if (f.samples_per_s > best.samples_per_s) best = f;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : kFashionMnistDir;
  constexpr int kSteps = 3000, kBatch = 32, kHidden = 128, kRepeats = 3;
  auto split = LoadFashionMnist(dir);
  if (!split.ok()) {
    std::fprintf(stderr, "bench-train: %s\n", split.status().ToString().c_str());
    return 1;
  }
  const MlpShape shape{784, kHidden, 10};

  Figure shoal;
  for (int r = 0; r < kRepeats; ++r) {  // best of three: the machine is shared
    auto params = InitMlpParams(shape, 1);
    MlpTrainer trainer(shape, {0.1F, kBatch}, 1);
    if (!trainer.Train(params, split->train, {}, 50).ok()) return 1;  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    auto stats = trainer.Train(params, split->train, {}, kSteps);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats.ok()) return 1;
    if (kSteps * kBatch / s > shoal.samples_per_s) {
      shoal.samples_per_s = kSteps * kBatch / s;
      shoal.test_acc = Evaluate(shape, params, split->test)->accuracy;
    }
  }
  const Figure numpy = RunAnchor("numpy", dir, kSteps, kBatch, kHidden, kRepeats);
  const Figure torch = RunAnchor("torch", dir, kSteps, kBatch, kHidden, kRepeats);
  if (numpy.samples_per_s <= 0 && torch.samples_per_s <= 0) {
    std::fprintf(stderr, "bench-train: no anchor ran: numpy: %s; torch: %s\n", numpy.why.c_str(),
                 torch.why.c_str());
    return 1;
  }
  std::printf(
      "bench-train: MLP 784-%d-10, batch %d, SGD lr 0.1, %d steps, Fashion-MNIST, 1 thread, best "
      "of %d runs each\n",
      kHidden, kBatch, kSteps, kRepeats);
  std::printf("%-26s %14s %10s  %s\n", "trainer", "samples/s", "test acc", "BLAS");
  std::printf("%-26s %14.0f %10.4f  %s\n", "shoal MlpTrainer", shoal.samples_per_s, shoal.test_acc,
              "none (own kernels)");
  const Figure* stronger = nullptr;
  bool all_openblas = true;
  for (const auto& [name, f] :
       {std::pair{"numpy (anchor)", &numpy}, std::pair{"torch (anchor)", &torch}}) {
    if (f->samples_per_s <= 0) {
      std::printf("%-26s %14s %10s  not measured: %s\n", name, "-", "-", f->why.c_str());
      continue;
    }
    std::printf("%-26s %14.0f %10.4f  %s\n", name, f->samples_per_s, f->test_acc, f->blas.c_str());
    all_openblas = all_openblas && f->blas.rfind("OpenBLAS", 0) == 0;
    if (!stronger || f->samples_per_s > stronger->samples_per_s) stronger = f;
  }
  if (!all_openblas) {
    std::printf(
        "WARNING: an anchor did not run on OpenBLAS (Debian package libopenblas0-pthread, "
        "%s)\n",
        shoal::bench::kDebianOpenBlasDir);
  }
  std::printf("ratio = shoal / stronger anchor (%s) = %.2f (higher is better)\n",
              stronger == &numpy ? "numpy" : "torch",
              shoal.samples_per_s / stronger->samples_per_s);
  std::printf("RESULT train ratio=%.2f\n", shoal.samples_per_s / stronger->samples_per_s);
  return 0;
}
