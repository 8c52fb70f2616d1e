// bench-secagg: one secure-aggregation round's cost, Shoal beside Flower 1.42 in the same run.
// The same clients (N, each with its own values) and the same model size (P float32: an MLP of
// P parameters for Shoal's job, one P-element array for Flower), SecAgg+ on both with the same
// graph degree (Shoal's `neighbours` k; Flower's num_shares k + 1, which counts the client
// itself) and threshold.
//   Shoal secure   a real shoald, an FLJob with spec.privacy.secureAggregation, N clients of
//                  the Python SDK driven stage by stage (bench/secagg_load.py), no dropouts
//   Shoal plain    the same shoald, the same model in an FLJob without it: plain F32 updates
//   Flower SecAgg+ flwr's SecAggPlusWorkflow and secaggplus_mod, messages handed over in process
//                  (bench/secagg_flower.py: no transport, Flower's protocol computation alone)
// Figures per round (medians over --rounds; min/median/max of the ratios over --runs):
//   server s       Shoal: CPU seconds of shoald and its children over the round (HTTP, JSON,
//                  folds, unmask, commit); Flower: the workflow's own time (routing, unmasking,
//                  dequantization, FedAvg), clients and message copies left out
//   client s       per client: the protocol's computation (keys, shares, quantize + mask,
//                  unmask shares), transport left out on both
//   round s        Shoal: first request -> the new version visible (wall)
//   commit s       Shoal: the round's last request answered -> the new version visible
// Targets: Shoal secure server s <= 1.3 x Shoal plain server s; <= 0.1 x Flower's server s.
//
//   bench-secagg [--clients 100] [--params 1000000] [--rounds 2 (Shoal)] [--flower-rounds 1]
//                [--runs 1] [--neighbours 14]
//                [--threshold 8] [--quick: 10 clients, 100k parameters, neighbours 4,
//                threshold 3]
#include <sys/wait.h>
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
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;
using Json = nlohmann::json;

namespace {

const std::string kSource = SHOAL_SOURCE_DIR;

std::string Num(double v, int digits = 3) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

struct Config {
  int clients = 100;
  uint64_t params = 1000000;
  int rounds = 2;
  int flower_rounds = 1;  // a Flower round at 100 x 1 M takes minutes on 2 cores
  int neighbours = 14;
  int threshold = 8;
};

std::string JobManifest(const std::string& name, const Config& c, int hidden, bool secure) {
  std::string m = "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata: {name: " + name +
                  "}\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: " +
                  std::to_string(hidden) + "}\n  data: {dataset: digits}\n  clients: {expected: " +
                  std::to_string(c.clients) +
                  "}\n  stop: {rounds: " + std::to_string(c.rounds + 1) +
                  "}\n  aggregation: {maxFanIn: 8, maxLeaves: 2}\n";
  if (secure) {
    m += "  privacy:\n    secureAggregation: {threshold: " + std::to_string(c.threshold) +
         ", neighbours: " + std::to_string(c.neighbours) +
         ", clipRange: 1.0, bits: 16, stageTimeout: 120s}\n";
  }
  return m;
}

// Shoal's two jobs in one shoald: {secure, plain}.
std::pair<Json, Json> RunShoal(const Config& c, int hidden) {
  Shoald shoald;
  Shoald::Options opt;
  const double update_bytes = (75.0 * hidden + 10) * 4;
  opt.pool_bytes = std::max<uint64_t>(
      uint64_t{512} << 20, static_cast<uint64_t>((update_bytes + 4096) * (3 * c.clients + 64)));
  opt.max_body_bytes = uint64_t{256} << 20;
  if (!shoal::bench::StartShoald(shoald, opt)) return {nullptr, nullptr};
  Json out[2];
  const char* jobs[2] = {"secure", "plain"};
  for (int i = 0; i < 2; ++i) {
    auto d = shoald.Deploy(JobManifest(jobs[i], c, hidden, i == 0));
    if (d.exit_code != 0) {
      std::fprintf(stderr, "bench-secagg: deploy %s: %s\n", jobs[i], d.err.c_str());
      continue;
    }
    shoald.WaitReady(std::string("fl.") + jobs[i], 1, 30000);
    const std::string token = shoald.CreateToken("fl-client", "", jobs[i]);
    out[i] = shoal::bench::RunJson(
        "bench-secagg",
        shoal::bench::SdkPython() + " " + kSource +
            "/bench/secagg_load.py --server http://127.0.0.1:" + std::to_string(shoald.port()) +
            " --job " + jobs[i] + " --token " + token + " --clients " + std::to_string(c.clients) +
            " --rounds " + std::to_string(c.rounds) + " --root-pid " +
            std::to_string(shoald.pid()) + " --threshold " + std::to_string(c.threshold) +
            (i == 0 ? " --secure" : ""));
  }
  if ((!out[0].is_object() || !out[1].is_object()) && std::getenv("SHOAL_BENCH_LOG")) {
    std::fprintf(stderr, "%s", shoald.Log().c_str());
  }
  shoald.Stop();
  return {out[0], out[1]};
}

Json RunFlower(const Config& c, uint64_t params) {
  return shoal::bench::RunJson(
      "bench-secagg",
      shoal::bench::SdkPython() + " " + kSource + "/bench/secagg_flower.py --clients " +
          std::to_string(c.clients) + " --params " + std::to_string(params) + " --rounds " +
          std::to_string(c.flower_rounds) + " --shares " + std::to_string(c.neighbours + 1) +
          " --threshold " + std::to_string(c.threshold));
}

double Get(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  int runs = 1;
  bool quick = false;
  shoal::bench::Args args(
      "bench-secagg [--clients N] [--params P] [--rounds R] [--flower-rounds R] [--runs K] "
      "[--neighbours k] "
      "[--threshold t] [--quick]");
  args.Option("--clients", &c.clients)
      .Option("--params", &c.params)
      .Option("--rounds", &c.rounds)
      .Option("--flower-rounds", &c.flower_rounds)
      .Option("--runs", &runs)
      .Option("--neighbours", &c.neighbours)
      .Option("--threshold", &c.threshold)
      .Switch("--quick", &quick, true);
  if (!args.Parse(argc, argv)) return 2;
  if (quick) c = {10, 100000, 2, 2, 4, 3};
  // Digits' MLP: 64 inputs, hidden H, 10 outputs: 75 H + 10 parameters.
  const int hidden = static_cast<int>(std::max<uint64_t>(1, (c.params - 10) / 75));
  const uint64_t params = 75ull * hidden + 10;
  std::vector<double> vs_plain, vs_flower, client_ratio;
  Json last_secure, last_plain, last_flower;
  bool exact = true;
  for (int r = 0; r < runs; ++r) {
    auto [secure, plain] = RunShoal(c, hidden);
    Json flower = RunFlower(c, params);
    const double s = Get(secure, "server_cpu_s"), p = Get(plain, "server_cpu_s"),
                 f = Get(flower, "server_median_s");
    vs_plain.push_back(s / p);
    vs_flower.push_back(s / f);
    client_ratio.push_back(Get(secure, "client_s") / Get(flower, "client_median_s"));
    if (secure.is_object()) {
      for (const auto& row : secure["rounds"]) exact = exact && row.value("exact", false);
    } else {
      exact = false;
    }
    last_secure = secure;
    last_plain = plain;
    last_flower = flower;
  }
  auto spread = [](const std::vector<double>& v) {
    const auto s = shoal::bench::SpreadOf(v);
    return Num(s.min) + " / " + Num(s.median) + " / " + Num(s.max);
  };
  std::printf(
      "bench-secagg: %d clients x %llu parameters, %d Shoal and %d Flower round(s) per "
      "run, %d run(s); neighbours %d, threshold %d (Flower: num_shares %d)\n",
      c.clients, static_cast<unsigned long long>(params), c.rounds, c.flower_rounds, runs,
      c.neighbours, c.threshold, c.neighbours + 1);
  std::printf("%-28s %14s %14s %16s\n", "figure (last run, median)", "Shoal secure", "Shoal plain",
              "Flower SecAgg+");
  std::printf("%-28s %14s %14s %16s\n", "server s per round",
              Num(Get(last_secure, "server_cpu_s")).c_str(),
              Num(Get(last_plain, "server_cpu_s")).c_str(),
              Num(Get(last_flower, "server_median_s")).c_str());
  std::printf("%-28s %14s %14s %16s\n", "client s per round",
              Num(Get(last_secure, "client_s")).c_str(), "-",
              Num(Get(last_flower, "client_median_s")).c_str());
  std::printf("%-28s %14s %14s %16s\n", "round s (wall)", Num(Get(last_secure, "round_s")).c_str(),
              Num(Get(last_plain, "round_s")).c_str(), "-");
  std::printf("%-28s %14s %14s %16s\n", "commit s", Num(Get(last_secure, "commit_s")).c_str(),
              Num(Get(last_plain, "commit_s")).c_str(), "-");
  std::printf("%-28s %14s\n", "unmasked sum == plain sum", exact ? "exact" : "NO");
  std::printf("\nratio (min / median / max over runs)          measured              target\n");
  std::printf("%-44s %-21s %s\n", "server: Shoal secure / Shoal plain", spread(vs_plain).c_str(),
              "<= 1.3");
  std::printf("%-44s %-21s %s\n", "server: Shoal secure / Flower SecAgg+",
              spread(vs_flower).c_str(), "<= 0.1");
  std::printf("%-44s %-21s %s\n", "client: Shoal / Flower", spread(client_ratio).c_str(), "-");
  std::printf(
      "(a shared 2-core machine: figures are noisy; Shoal's clients run on the machine "
      "shoald runs on)\n");
  std::printf("RESULT secagg ratio=%s\n", Num(shoal::bench::SpreadOf(vs_flower).median).c_str());
  return exact ? 0 : 1;
}
