// bench-train: local-training throughput (samples/s) of the client's MLP trainer, MLP 784-128-10,
// batch 32, plain SGD on Fashion-MNIST, one thread, against the same model and optimiser in
// numpy (bench/train_anchor.py, /usr/bin/python3 with python3-numpy) measured in the same run.
// Last line: RESULT train ratio=<shoal samples/s / numpy samples/s>.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shoal/client/dataset.h"
#include "shoal/client/mlp_trainer.h"

using namespace shoal::client;

namespace {

struct Figure {
  double samples_per_s = 0;
  double test_acc = 0;
};

// Runs the numpy anchor with one BLAS thread (the trainer uses one core) and parses its line.
bool RunAnchor(const std::string& dir, int steps, int batch, int hidden, Figure* out) {
  const std::string cmd =
      "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "
      "/usr/bin/python3 " SHOAL_TRAIN_ANCHOR " --data '" +
      dir + "' --steps " + std::to_string(steps) + " --batch " + std::to_string(batch) +
      " --hidden " + std::to_string(hidden);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char line[256] = {};
  bool ok = false;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (std::sscanf(line, "samples_per_s=%lf test_acc=%lf", &out->samples_per_s, &out->test_acc) ==
        2) {
      ok = true;
    }
  }
  return pclose(p) == 0 && ok;
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
  Figure numpy;
  if (!RunAnchor(dir, kSteps, kBatch, kHidden, &numpy)) {
    std::fprintf(stderr,
                 "bench-train: the numpy anchor failed (needs /usr/bin/python3 and "
                 "python3-numpy)\n");
    return 1;
  }
  std::printf(
      "bench-train: MLP 784-%d-10, batch %d, SGD lr 0.1, %d steps, Fashion-MNIST, 1 thread\n",
      kHidden, kBatch, kSteps);
  std::printf("%-26s %14s %10s\n", "trainer", "samples/s", "test acc");
  std::printf("%-26s %14.0f %10.4f\n", "shoal MlpTrainer", shoal.samples_per_s, shoal.test_acc);
  std::printf("%-26s %14.0f %10.4f\n", "numpy (anchor)", numpy.samples_per_s, numpy.test_acc);
  std::printf("RESULT train ratio=%.2f\n", shoal.samples_per_s / numpy.samples_per_s);
  return 0;
}
