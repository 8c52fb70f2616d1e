// bench-dp: central differential privacy on Fashion-MNIST, accuracy against ε, Shoal beside
// Flower 1.42 in the same run. FedAvg, 16 clients, Dirichlet(0.5) labels, the 784-128-10 ReLU
// MLP, one local epoch of SGD per round (bench/fl_flower_train.py: the same partition, initial
// model, batch order and training on both), every client every round (sampling rate 1). For each
// noise multiplier σ (default 0.5, 1, 2; clip C = 1):
//   Shoal   shoald FLJob fedavg with spec.privacy.dp {noiseMultiplier σ, clip {fixed C}}, the
//           Python SDK's run_client; ε read from shoald's /metrics (shoal_fl_dp_epsilon).
//   Flower  flower-superlink --simulation, 16 simulated SuperNodes, flwr's FedAvg wrapped in
//           DifferentialPrivacyServerSideFixedClipping(σ, C, 16).
// Both clip each update's change to C and add N(0, (σC/16)^2) to the mean; Flower's FedAvg
// weights the clipped updates by their sample counts, Shoal's mean is unweighted (the DP
// sensitivity C/n holds only for the unweighted mean). ε at δ = 1e-5 is the RDP accountant's
// (the same for both: q = 1, σ, R releases). Columns: test accuracy of the final global model,
// and the run's wall time per round (model download, 16 clients' training on this machine,
// upload, commit), which the clients' training dominates on both.
// RESULT: the median over σ of Shoal's round time / Flower's at equal σ (lower is better).
//
//   bench-dp [--rounds R (4)] [--noise 0.5,1,2] [--clip 1] [--seed 1] [--epochs 1] [--lr 0.05]
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "peer_process.h"
#include "run_stats.h"
#include "shoal/fl/privacy/rdp_accountant.h"
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;
using Json = nlohmann::json;

namespace {

const std::string kSource = SHOAL_SOURCE_DIR;

std::string Num(double v, int digits = 3) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

struct Run {
  bool ok = false;
  double accuracy = NAN, round_s = NAN, epsilon = NAN;
};

Run FromJson(const Json& j, int rounds, const char* name) {
  Run r;
  if (!j.is_object() || !j.value("ok", false)) {
    std::fprintf(stderr, "bench-dp: %s failed: %s\n", name,
                 j.is_object() ? j.value("error", std::string()).c_str() : "no result");
    return r;
  }
  const auto acc = j["accuracy"].get<std::vector<double>>();
  r.ok = !acc.empty();
  r.accuracy = acc.empty() ? NAN : acc.back();
  r.round_s = j.value("seconds", NAN) / rounds;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 4, seed = 1, epochs = 1;
  double clip = 1.0, lr = 0.05;
  std::vector<std::string> noise = {"0.5", "1", "2"};
  shoal::bench::Args args(
      "bench-dp [--rounds R] [--noise 0.5,1,2] [--clip C] [--seed S] [--epochs E] [--lr LR]");
  args.Option("--rounds", &rounds)
      .Option("--noise", &noise)
      .Option("--clip", &clip)
      .Option("--seed", &seed)
      .Option("--epochs", &epochs)
      .Option("--lr", &lr);
  if (!args.Parse(argc, argv)) return 2;
  const int clients = 16;
  const double delta = 1e-5;
  const std::string python = shoal::bench::SdkPython();
  const std::string common = " --clients 16 --rounds " + std::to_string(rounds) + " --epochs " +
                             std::to_string(epochs) + " --lr " + Num(lr, 4) +
                             " --batch 32 --alpha 0.5 --seed " + std::to_string(seed);
  std::vector<std::vector<std::string>> table;
  std::vector<double> ratios;
  int failures = 0;
  for (const std::string& sigma_text : noise) {
    const double sigma = std::stod(sigma_text);
    const std::string init = "/tmp/bench-dp-init-" + std::to_string(getpid()) + ".npz";
    Shoald shoald;
    if (!shoal::bench::StartShoald(shoald)) return 1;
    const std::string job = "fmnistdp";
    auto d = shoald.Deploy(
        "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
        "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 128, seed: " +
        std::to_string(seed) + "}\n  clients: {expected: " + std::to_string(clients) +
        "}\n  stop: {rounds: " + std::to_string(rounds) +
        "}\n  training: {localSteps: 100, learningRate: " + Num(lr, 4) +
        ", batchSize: 32}\n  privacy:\n    dp: {noiseMultiplier: " + sigma_text +
        ", clip: {fixed: " + Num(clip, 4) + "}, delta: 1.0e-5}\n");
    if (d.exit_code != 0) {
      std::fprintf(stderr, "deploy: %s\n", d.err.c_str());
      return 1;
    }
    shoald.WaitReady("fl." + job, 1, 30000);
    const std::string token = shoald.CreateToken("fl-client", "", job);
    Run s = FromJson(
        shoal::bench::RunJson(
            "bench-dp", python + " " + kSource + "/bench/fl_flower_train.py --system shoal" +
                            common + " --server 127.0.0.1:" + std::to_string(shoald.port()) +
                            " --job " + job + " --api-token " + token + " --init-out " + init),
        rounds, "Shoal");
    s.epsilon = shoald.Metric("shoal_fl_dp_epsilon", "job=\"" + job + "\"");
    shoald.Stop();
    Run f = FromJson(
        shoal::bench::RunJson("bench-dp", python + " " + kSource +
                                              "/bench/fl_flower_train.py --system flower" + common +
                                              " --init-npz " + init + " --dp-noise " + sigma_text +
                                              " --dp-clip " + Num(clip, 4)),
        rounds, "Flower");
    std::remove(init.c_str());
    // Flower's release count is the rounds run; the same accountant gives its ε.
    shoal::privacy::RdpAccountant acc;
    for (int r = 0; r < rounds; ++r) acc.Step(1.0, sigma);
    f.epsilon = acc.Spent(delta).epsilon;
    failures += (s.ok ? 0 : 1) + (f.ok ? 0 : 1);
    const double ratio = s.round_s / f.round_s;
    if (s.ok && f.ok) ratios.push_back(ratio);
    table.push_back({sigma_text, Num(s.epsilon, 2), Num(f.epsilon, 2), Num(s.accuracy, 4),
                     Num(f.accuracy, 4), Num(s.round_s, 2), Num(f.round_s, 2), Num(ratio, 3)});
  }
  std::printf(
      "bench-dp: central DP, FedAvg on Fashion-MNIST, %d clients (Dirichlet 0.5), 784-128-10 "
      "MLP, %d local epoch(s) of SGD (lr %s, batch 32), %d rounds, clip C = %s, δ = 1e-5, seed "
      "%d. Shoal: shoald FLJob spec.privacy.dp + the Python SDK's clients; Flower 1.42: "
      "flower-superlink --simulation with DifferentialPrivacyServerSideFixedClipping(FedAvg). "
      "Accuracy: the final global model on the 10,000 test images. s/round: wall time per round "
      "(clients' training included; this machine is shared, expect noise)\n",
      clients, epochs, Num(lr, 4).c_str(), rounds, Num(clip, 3).c_str(), seed);
  std::printf("%6s %10s %10s %10s %10s %12s %12s %8s\n", "sigma", "eps shoal", "eps flwr",
              "acc shoal", "acc flwr", "s/rnd shoal", "s/rnd flwr", "ratio");
  for (const auto& r : table) {
    std::printf("%6s %10s %10s %10s %10s %12s %12s %8s\n", r[0].c_str(), r[1].c_str(), r[2].c_str(),
                r[3].c_str(), r[4].c_str(), r[5].c_str(), r[6].c_str(), r[7].c_str());
  }
  const auto spread = shoal::bench::SpreadOf(ratios);
  std::printf("round time Shoal / Flower at equal σ: min %s median %s max %s\n",
              Num(spread.min, 3).c_str(), Num(shoal::bench::Median(ratios), 3).c_str(),
              Num(spread.max, 3).c_str());
  std::printf("RESULT bench_dp ratio=%s\n", Num(shoal::bench::Median(ratios), 3).c_str());
  return failures == 0 ? 0 : 1;
}
