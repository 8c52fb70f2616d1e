// bench-fl: time to a target accuracy on Fashion-MNIST (16 clients, Dirichlet(0.5) non-IID
// partition, lognormal client speeds, the same seeds for every run) through a real shoald and
// shoal-client, for each algorithm the coordinator runs (FedAvg, FedAsync, FedBuff, FedFix,
// FedCompass); each time is compared with FedAvg's
// (the anchor, same run). Lower is better. FedCompass's paper reports it fastest.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "shoald_fixture.h"

using namespace shoal::testing;

namespace {

struct Run {
  std::string algorithm;
  double seconds = 0;
  double accuracy = 0;
  uint64_t version = 0;
  bool reached = false;
};

std::string Manifest(const std::string& name, const std::string& algorithm, double target) {
  std::string params;
  if (algorithm == "fedbuff") params = "    params: {k: 8}\n";
  // FedFix's period is the user's choice (the paper leaves it open): about one median client's
  // round here (100 steps x the median step time x the time scale).
  if (algorithm == "fedfix") params = "    params: {period: 1.0}\n";
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm:\n    name: " + algorithm + "\n" + params +
         "  model: {architecture: mlp, hidden: 128, seed: 1}\n  clients: {expected: 16}\n"
         "  stop: {rounds: 2000, accuracy: " + std::to_string(target) + "}\n"
         "  training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 8, maxLeaves: 4, maxStaleness: 50}\n";
}

}  // namespace

int main(int argc, char** argv) {
  double target = 0.82, max_seconds = 120;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--target") target = std::stod(argv[++i]);
    if (std::string(argv[i]) == "--max-seconds") max_seconds = std::stod(argv[++i]);
  }
  const std::vector<std::string> algorithms = {"fedavg", "fedasync", "fedbuff", "fedfix", "fedcompass"};
  std::vector<Run> runs;
  for (size_t i = 0; i < algorithms.size(); ++i) {
    const std::string& a = algorithms[i];
    std::fprintf(stderr, "[%zu/%zu] %s to accuracy %.2f (at most %.0f s)\n", i + 1,
                 algorithms.size(), a.c_str(), target, max_seconds);
    Shoald shoald;
    if (!shoald.Start()) {
      std::fprintf(stderr, "shoald did not start:\n%s", shoald.Log().c_str());
      return 1;
    }
    const std::string job = "bench-" + a;
    auto d = shoald.Deploy(Manifest(job, a, target));
    if (d.exit_code != 0) {
      std::fprintf(stderr, "deploy %s: %s\n", a.c_str(), d.err.c_str());
      return 1;
    }
    const std::string cmd = "SHOAL_TOKEN=" + shoald.CreateToken("fl-client", "", job) + " " +
                            BinDir() + "/shoal-client --server http://127.0.0.1:" +
                            std::to_string(shoald.port()) + " --job " + job +
                            " --clients 16 --partition dirichlet:0.5 --speeds lognormal:1.0"
                            " --seed 1 --max-seconds " + std::to_string(max_seconds) + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
    Run r;
    r.algorithm = a;
    std::smatch m;
    if (std::regex_search(out, m, std::regex("job done after ([0-9.]+) s"))) {
      r.seconds = std::stod(m[1]);
      r.reached = true;
    } else if (std::regex_search(out, m, std::regex("(?:stopped at --max-seconds|clients stopped) after ([0-9.]+) s"))) {
      r.seconds = std::stod(m[1]);
    } else {
      r.seconds = max_seconds;
    }
    if (std::regex_search(out, m, std::regex("final accuracy ([0-9.]+) .*\\(version ([0-9]+)"))) {
      r.accuracy = std::stod(m[1]);
      r.version = std::stoull(m[2]);
    }
    r.reached = r.reached && r.accuracy >= target;
    runs.push_back(r);
    shoald.Stop();
  }
  const double base = runs[0].seconds;
  std::printf("bench-fl: Fashion-MNIST, MLP 784-128-10, 16 clients, dirichlet:0.5, "
              "lognormal:1.0 speeds, time scale 0.2, target accuracy %.2f; lower is better\n",
              target);
  std::printf("%-12s %10s %10s %9s %8s %14s\n", "algorithm", "seconds", "accuracy", "version",
              "reached", "ratio/fedavg");
  for (const auto& r : runs) {
    std::printf("%-12s %10.1f %10.4f %9llu %8s %14.3f\n", r.algorithm.c_str(), r.seconds,
                r.accuracy, static_cast<unsigned long long>(r.version), r.reached ? "yes" : "no",
                r.seconds / base);
  }
  std::printf("RESULT fl ratio=%.3f\n", runs.back().seconds / base);
  return 0;
}
