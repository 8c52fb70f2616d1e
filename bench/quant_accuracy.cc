// bench-quant-accuracy: what block-quantized updates cost in accuracy. Fashion-MNIST FedAvg
// through a real shoald and shoal-client (16 clients, Dirichlet(0.5) labels, lognormal(1.0) step
// times, MLP 784-128-10, every client each round), the same job and seeds with the updates sent
// as f32 (the anchor, in the same run), int8 and int4 (spec.aggregation.wireFormats lists the
// one format; shoal-client --dtype). Figures: the final model's test accuracy after --rounds
// rounds per seed, and the points lost against f32 in the same seed (median and range over the
// seeds). RESULT quant_accuracy ratio = the worst format's median accuracy / f32's.
//
//   bench-quant-accuracy [--formats int8,int4] [--rounds R (20)] [--seeds N (2)] [--first-seed S]
//                        [--max-seconds T (240)]
#include <algorithm>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "run_stats.h"

using namespace shoal::testing;

namespace {

std::string Manifest(const std::string& name, const std::string& format, int rounds,
                     uint64_t seed) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm:\n    name: fedavg\n"
         "  model: {architecture: mlp, hidden: 128, seed: " +
         std::to_string(seed) +
         "}\n"
         "  clients: {expected: 16}\n"
         "  stop: {rounds: " +
         std::to_string(rounds) +
         "}\n"
         "  training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 8, maxLeaves: 4, maxStaleness: 50, wireFormats: [" +
         format + "]}\n";
}

// The final accuracy of one run, or -1 when the job did not finish.
double RunOne(const std::string& format, int rounds, uint64_t seed, double max_seconds) {
  Shoald shoald;
  if (!shoal::bench::StartShoald(shoald)) return -1;
  const std::string job = "quant-" + format;
  auto d = shoald.Deploy(Manifest(job, format, rounds, seed));
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy %s: %s\n", job.c_str(), d.err.c_str());
    return -1;
  }
  const std::string cmd =
      "SHOAL_TOKEN=" + shoald.CreateToken("fl-client", "", job) + " " + BinDir() +
      "/shoal-client --server http://127.0.0.1:" + std::to_string(shoald.port()) + " --job " + job +
      " --clients 16 --partition dirichlet:0.5 --speeds lognormal:1.0 --dtype " + format +
      " --seed " + std::to_string(seed) + " --max-seconds " + std::to_string(max_seconds) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  shoald.Stop();
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("job done after ([0-9.]+) s")) ||
      !std::regex_search(out, m, std::regex("final accuracy ([0-9.]+)"))) {
    std::fprintf(stderr, "bench-quant-accuracy: %s seed %llu did not finish:\n%s\n", format.c_str(),
                 static_cast<unsigned long long>(seed),
                 out.substr(out.size() > 2000 ? out.size() - 2000 : 0).c_str());
    return -1;
  }
  return std::stod(m[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> formats = {"int8", "int4"};
  int rounds = 20, seeds = 2;
  uint64_t first_seed = 1;
  double max_seconds = 240;
  shoal::bench::Args args(
      "bench-quant-accuracy [--formats int8,int4] [--rounds R] [--seeds N] [--first-seed S] "
      "[--max-seconds T]");
  args.Option("--formats", &formats)
      .Option("--rounds", &rounds)
      .FlRuns(&seeds, &first_seed, &max_seconds);
  if (!args.Parse(argc, argv)) return 2;
  formats.insert(formats.begin(), "f32");
  // acc[f][s]: format f, seed s.
  std::vector<std::vector<double>> acc(formats.size());
  for (int s = 0; s < seeds; ++s) {
    for (size_t f = 0; f < formats.size(); ++f) {
      const double a = RunOne(formats[f], rounds, first_seed + s, max_seconds);
      std::fprintf(stderr, "bench-quant-accuracy: %s seed %llu: %.4f\n", formats[f].c_str(),
                   static_cast<unsigned long long>(first_seed + s), a);
      acc[f].push_back(a);
    }
  }
  std::printf(
      "Fashion-MNIST FedAvg, 16 clients (Dirichlet 0.5, lognormal 1.0), MLP 784-128-10, %d "
      "rounds, seeds %llu-%llu; accuracy of the final model; points lost = f32's accuracy - the "
      "format's, same seed (anchor: f32 in the same run)\n",
      rounds, static_cast<unsigned long long>(first_seed),
      static_cast<unsigned long long>(first_seed + seeds - 1));
  std::printf("%-8s %-28s %10s   %s\n", "format", "accuracy per seed", "median",
              "points lost min/med/max");
  double worst = 1e9;
  for (size_t f = 0; f < formats.size(); ++f) {
    std::string per;
    std::vector<double> lost;
    bool ok = true;
    for (int s = 0; s < seeds; ++s) {
      char b[16];
      std::snprintf(b, sizeof b, "%s%.4f", s ? " " : "", acc[f][s]);
      per += b;
      ok = ok && acc[f][s] >= 0 && acc[0][s] >= 0;
      lost.push_back(100 * (acc[0][s] - acc[f][s]));
    }
    std::sort(lost.begin(), lost.end());
    const double med = shoal::bench::Median(acc[f]);
    std::printf("%-8s %-28s %10.4f   %.2f/%.2f/%.2f\n", formats[f].c_str(), per.c_str(), med,
                lost.front(), lost[lost.size() / 2], lost.back());
    if (f > 0) worst = ok ? std::min(worst, med / shoal::bench::Median(acc[0])) : 0;
  }
  std::printf("RESULT quant_accuracy ratio=%.4f\n", worst);
  return 0;
}
