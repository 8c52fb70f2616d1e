// bench-fl-appfl: Shoal's FedCompass against the authors' own implementation, APPFL 1.12 (its
// CompassScheduler and FedCompassAggregator at its example config's defaults: Q_min 20, Q_max
// 100, lambda 1.5, speed momentum 0.9, polynomial staleness a 0.5, alpha 0.9).
//
// 1. Fidelity: APPFL's scheduler runs in virtual time (bench/fl_appfl_replay.py: its real
//    classes, only the clock and the timer replaced) over simulated clients; the arrival and
//    timer times it saw are replayed through Shoal's FedCompassScheduler
//    (tests/support/compass_trace.h) and every answer compared: applied alone, waiting in which
//    group, late, which updates each group aggregation combines, each client's next local steps
//    and group. The first rounds are printed side by side.
// 2. Speed: wall time to a target accuracy on Fashion-MNIST for FedCompass, FedBuff and FedAsync
//    with APPFL's server (ServerAgent in the clients' process: its best showing) and with shoald
//    (a real shoald, its HTTP API). The clients are one simulator for both
//    (bench/fl_appfl_train.py): the same partition (shoal-client's Partition), the same seconds
//    per step (SampleStepSeconds), the same initial model (model::InitModel), the same torch
//    training (SGD 0.1, batch 32) and the same evaluator; a client sleeps until steps x its
//    seconds per step x the time scale have passed since it started training.
//    FedBuff and FedAsync as APPFL runs them (its example configs): each update weighted
//    alpha s(u) / N, FedBuff K = N/2; Shoal's jobs are given the same (fedbuff eta = 0.9 K / N,
//    fedasync alpha = 0.9 / N, a = 0.5).
//
// RESULT fl_appfl ratio = Shoal's FedCompass time to the target / APPFL's, median over seeds.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "project_python.h"
#include "run_stats.h"
#include "shoal/common/format_number.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoal/tools/flsim/partition.h"
#include "shoal/tools/flsim/speeds.h"
#include "tests/support/compass_trace.h"
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;

using shoal::FormatNumber;
using shoal::bench::Median;

namespace {

struct Options {
  bool quick = false;
  int seeds = 3;
  uint64_t first_seed = 1;
  double max_seconds = 150;
  double target = 0.70;
  int clients = 8;
  double time_scale = 0.5;
  std::string partition = "dirichlet:0.5", speeds = "lognormal:0.5";
  int events = 200;
  std::vector<std::string> algorithms = {"fedcompass", "fedbuff", "fedasync"};
  std::string work_dir;
};

std::string Run(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  if (status) *status = st;
  return out;
}

// The helper scripts' folder (bench/ of the source tree this binary was built from).
std::string SourceDir() { return std::string(SHOAL_SOURCE_DIR) + "/bench"; }

// ---- 1. fidelity ------------------------------------------------------------------------------

struct Fidelity {
  size_t events = 0, same = 0, dropped = 0;
};

bool CompareScenario(const std::string& scenario, const Options& o, bool print, Fidelity* f) {
  const std::string path = o.work_dir + "/" + scenario + ".trace";
  int st = 0;
  std::string cmd = shoal::bench::ProjectPython() + " " + SourceDir();
  cmd += "/fl_appfl_replay.py --scenario ";
  cmd += scenario;
  cmd += " --events ";
  cmd += std::to_string(o.events);
  cmd += " --out ";
  cmd += path + " 2>&1";
  const std::string err = Run(cmd, &st);
  if (st != 0) {
    std::fprintf(stderr, "fl_appfl_replay.py %s failed:\n%s\n", scenario.c_str(), err.c_str());
    return false;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string error;
  const CompassTrace tr = ParseCompassTrace(text.str(), &error);
  if (!error.empty()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), error.c_str());
    return false;
  }
  const std::vector<std::string> shoal = ReplayCompassTrace(tr);
  size_t same = 0, first_diff = SIZE_MAX;
  for (size_t i = 0; i < shoal.size(); ++i) {
    if (shoal[i] == tr.events[i].line) {
      ++same;
    } else if (first_diff == SIZE_MAX) {
      first_diff = i;
    }
  }
  f->events += shoal.size();
  f->same += same;
  f->dropped += static_cast<size_t>(tr.dropped);
  std::printf(
      "  %-12s %zu clients: %zu/%zu events identical, %zu group aggregations, %zu late "
      "updates%s%s\n",
      scenario.c_str(), static_cast<size_t>(tr.params.num_clients), same, shoal.size(),
      static_cast<size_t>(std::count_if(
          tr.events.begin(), tr.events.end(),
          [](const auto& e) { return e.line.find(" aggregate ") != std::string::npos; })),
      static_cast<size_t>(std::count_if(
          tr.events.begin(), tr.events.end(),
          [](const auto& e) { return e.line.find(" general -> ") != std::string::npos; })),
      first_diff == SIZE_MAX ? "" : ", first difference at event ",
      first_diff == SIZE_MAX ? "" : std::to_string(first_diff).c_str());
  if (first_diff != SIZE_MAX) {
    std::printf("    APPFL: %s\n    Shoal: %s\n", tr.events[first_diff].line.c_str(),
                shoal[first_diff].c_str());
  }
  if (print) {
    std::printf("\n  %s, the first rounds (client:steps:group assignments; APPFL | Shoal):\n",
                scenario.c_str());
    for (size_t i = 0; i < std::min<size_t>(24, shoal.size()); ++i) {
      // The event, then each side's answer (the text after the time).
      const std::string& a = tr.events[i].line;
      const size_t cut = a.find(' ', a.find(' ', 2) + 1);
      const std::string head = tr.events[i].timer ? a.substr(0, a.find(' ', 2)) : a.substr(0, cut);
      const std::string appfl = a.substr(head.size() + 1), ours = shoal[i].substr(head.size() + 1);
      std::printf("  %-26s %-52s | %s%s\n", head.c_str(), appfl.c_str(), ours.c_str(),
                  appfl == ours ? "" : "   <-- differs");
    }
    std::printf("\n");
  }
  return true;
}

// ---- 2. speed ---------------------------------------------------------------------------------

bool WritePlan(const Options& o, uint64_t seed, const shoal::client::DatasetSplit& data,
               std::string* plan_path) {
  auto pspec = shoal::client::ParsePartitionSpec(o.partition);
  auto sspec = shoal::client::ParseSpeedSpec(o.speeds);
  if (!pspec.ok() || !sspec.ok()) {
    std::fprintf(stderr, "bad --partition or --speeds\n");
    return false;
  }
  // As shoal-client draws them: the partition from the seed, the speeds from seed + 1.
  auto parts =
      shoal::client::Partition(data.train.labels, data.train.num_classes, o.clients, *pspec, seed);
  if (!parts.ok()) {
    std::fprintf(stderr, "partition: %s\n", parts.status().message().c_str());
    return false;
  }
  const std::vector<double> steps = shoal::client::SampleStepSeconds(*sspec, o.clients, seed + 1);
  const shoal::model::Model init = shoal::model::InitModel(shoal::model::MlpSpec(), seed);
  const std::string base = o.work_dir + "/plan-seed" + std::to_string(seed);
  {
    std::ofstream f(base + ".f32", std::ios::binary);
    f.write(reinterpret_cast<const char*>(init.values.data()),
            static_cast<std::streamsize>(init.values.size() * sizeof(float)));
  }
  std::ofstream j(base + ".json");
  j << "{\"init\": \"" << base << ".f32\", \"step_seconds\": [";
  for (size_t i = 0; i < steps.size(); ++i) j << (i ? ", " : "") << FormatNumber("%.9g", steps[i]);
  j << "], \"partitions\": [";
  for (size_t c = 0; c < parts->size(); ++c) {
    j << (c ? ", " : "") << "[";
    for (size_t i = 0; i < (*parts)[c].size(); ++i) j << (i ? "," : "") << (*parts)[c][i];
    j << "]";
  }
  j << "]}\n";
  *plan_path = base + ".json";
  return true;
}

struct RunResult {
  bool ok = false, reached = false;
  double seconds = 0, accuracy = 0;
  uint64_t version = 0, updates = 0;
};

RunResult ParseResult(const std::string& out) {
  RunResult r;
  std::smatch m;
  if (std::regex_search(out, m,
                        std::regex("APPFL_RESULT system=\\w+ algorithm=\\w+ seconds=([0-9.]+) "
                                   "reached=([01]) accuracy=([0-9.]+) version=(-?[0-9]+) "
                                   "updates=([0-9]+)"))) {
    r.ok = true;
    r.seconds = std::stod(m[1]);
    r.reached = m[2] == "1";
    r.accuracy = std::stod(m[3]);
    r.version = static_cast<uint64_t>(std::max(0LL, std::stoll(m[4])));
    r.updates = std::stoull(m[5]);
  }
  return r;
}

std::string TrainCommand(const Options& o, const std::string& algorithm, uint64_t seed,
                         const std::string& plan) {
  std::string cmd = shoal::bench::ProjectPython() + " " + SourceDir();
  cmd += "/fl_appfl_train.py --plan ";
  cmd += plan;
  cmd += " --algorithm ";
  cmd += algorithm;
  cmd += " --seed ";
  cmd += std::to_string(seed);
  cmd += " --target ";
  cmd += FormatNumber("%.4f", o.target);
  cmd += " --max-seconds ";
  cmd += FormatNumber("%.0f", o.max_seconds);
  cmd += " --time-scale ";
  cmd += FormatNumber("%.3f", o.time_scale);
  return cmd;
}

std::string Manifest(const std::string& name, const std::string& algorithm, const Options& o,
                     uint64_t seed) {
  const int k = (o.clients + 1) / 2;
  std::string params;
  if (algorithm == "fedbuff") {
    params = "{k: ";
    params += std::to_string(k);
    params += ", eta: ";
    params += FormatNumber("%.6f", 0.9 * k / o.clients) + ", a: 0.5}";
  } else if (algorithm == "fedasync") {
    params = "{alpha: ";
    params += FormatNumber("%.6f", 0.9 / o.clients) + ", a: 0.5}";
  } else {
    params = "{alpha: 0.9, a: 0.5, q_min: 20}";
  }
  std::string m = "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name;
  m += "\nspec:\n  algorithm:\n    name: ";
  m += algorithm + "\n    params: " + params;
  m += "\n  model: {architecture: mlp, hidden: 128, seed: ";
  m += std::to_string(seed);
  m += "}\n  clients: {expected: ";
  m += std::to_string(o.clients);
  return m +
         "}\n  stop: {rounds: 100000}\n"
         "  training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 8, maxLeaves: 4, maxStaleness: 1000}\n";
}

RunResult RunAppfl(const Options& o, const std::string& algorithm, uint64_t seed,
                   const std::string& plan) {
  const std::string out = Run(TrainCommand(o, algorithm, seed, plan) + " --system appfl 2>&1");
  RunResult r = ParseResult(out);
  if (!r.ok) std::fprintf(stderr, "APPFL %s run failed:\n%s\n", algorithm.c_str(), out.c_str());
  return r;
}

RunResult RunShoal(const Options& o, const std::string& algorithm, uint64_t seed,
                   const std::string& plan) {
  RunResult r;
  Shoald shoald;
  if (!shoal::bench::StartShoald(shoald)) return r;
  const std::string job = std::string("appfl-") + algorithm;
  auto d = shoald.Deploy(Manifest(job, algorithm, o, seed));
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy %s: %s\n", algorithm.c_str(), d.err.c_str());
    return r;
  }
  const std::string out =
      Run(std::string("SHOAL_TOKEN=") + shoald.CreateToken("fl-client", "", job) + " " +
          TrainCommand(o, algorithm, seed, plan) + " --system shoal --server http://127.0.0.1:" +
          std::to_string(shoald.port()) + " --job " + job + " 2>&1");
  shoald.Stop();
  r = ParseResult(out);
  if (!r.ok) std::fprintf(stderr, "Shoal %s run failed:\n%s\n", algorithm.c_str(), out.c_str());
  return r;
}

std::string Range(const std::vector<double>& v) {
  if (v.empty()) return "-";
  return FormatNumber("%.1f", *std::min_element(v.begin(), v.end())) + " / " +
         FormatNumber("%.1f", Median(v)) + " / " +
         FormatNumber("%.1f", *std::max_element(v.begin(), v.end()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  shoal::bench::Args args(
      "bench-fl-appfl [--quick] [--seeds N] [--first-seed S] [--max-seconds T] [--target ACC] "
      "[--clients N] [--time-scale X] [--speeds SPEC] [--partition SPEC] [--algorithms LIST] "
      "[--events N] [--work-dir DIR]");
  args.FlRuns(&o.seeds, &o.first_seed, &o.max_seconds)
      .Switch("--quick", &o.quick, true)
      .Option("--target", &o.target)
      .Option("--clients", &o.clients)
      .Option("--time-scale", &o.time_scale)
      .Option("--speeds", &o.speeds)
      .Option("--partition", &o.partition)
      .Option("--algorithms", &o.algorithms)
      .Option("--events", &o.events)
      .Option("--work-dir", &o.work_dir);
  if (!args.Parse(argc, argv)) return 2;
  if (o.quick) {
    o.seeds = 1;
    o.algorithms = {"fedcompass"};
  }
  if (o.seeds < 1 || o.clients < 2) return args.Usage() ? 0 : 2;
  if (o.work_dir.empty()) {
    char tmpl[] = "/tmp/bench-fl-appfl-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    o.work_dir = tmpl;
  }
  std::filesystem::create_directories(o.work_dir);
  const std::string appfl_version =
      Run(shoal::bench::ProjectPython() + " -c 'import appfl; print(appfl.__version__)' 2>&1");

  std::printf(
      "bench-fl-appfl: APPFL %s (its CompassScheduler + FedCompassAggregator, defaults of its "
      "example config server_fedcompass.yaml: Q_min 20, Q_max 100, lambda 1.5, speed momentum "
      "0.9, polynomial staleness a 0.5, alpha 0.9) against Shoal's FedCompass\n",
      appfl_version.substr(0, appfl_version.find('\n')).c_str());
  std::printf(
      "\n== fidelity: APPFL's scheduler in virtual time, its arrival and timer times "
      "replayed through Shoal's FedCompassScheduler (%d events a scenario)\n",
      o.events);
  Fidelity fid;
  const char* scenarios[] = {"uniform5", "lognormal16", "stragglers8"};
  for (const char* s : scenarios) {
    if (!CompareScenario(s, o, std::string(s) == "stragglers8", &fid)) return 1;
  }
  std::printf(
      "fidelity: %zu/%zu events identical (steps, groups, arrival groups, aggregated "
      "sets); %zu group aggregations where APPFL's merged buffer (a dict by client) "
      "drops a late update of a client whose newer update is also there: Shoal folds "
      "both\n",
      fid.same, fid.events, fid.dropped);

  // ---- speed ----
  auto data = shoal::client::LoadFashionMnist();
  if (!data.ok()) {
    std::fprintf(stderr, "Fashion-MNIST: %s\n", data.status().message().c_str());
    return 1;
  }
  std::printf(
      "\n== speed: Fashion-MNIST, MLP 784-128-10, %d clients, partition %s, seconds per step %s "
      "x time scale %.2f, SGD 0.1 batch 32, target accuracy %.2f (the whole test split), at most "
      "%.0f s, seeds %llu..%llu; both servers fed by the same Python client simulator\n",
      o.clients, o.partition.c_str(), o.speeds.c_str(), o.time_scale, o.target, o.max_seconds,
      static_cast<unsigned long long>(o.first_seed),
      static_cast<unsigned long long>(o.first_seed + o.seeds - 1));
  std::map<std::string, std::vector<RunResult>> appfl, shoal_runs;
  for (int s = 0; s < o.seeds; ++s) {
    const uint64_t seed = o.first_seed + s;
    std::string plan;
    if (!WritePlan(o, seed, *data, &plan)) return 1;
    for (const std::string& alg : o.algorithms) {
      for (int side = 0; side < 2; ++side) {
        std::fprintf(stderr, "seed %llu %s on %s ...\n", static_cast<unsigned long long>(seed),
                     alg.c_str(), side == 0 ? "APPFL" : "Shoal");
        RunResult r = side == 0 ? RunAppfl(o, alg, seed, plan) : RunShoal(o, alg, seed, plan);
        if (!r.ok) return 1;
        std::fprintf(stderr, "  %.1f s, accuracy %.4f, version %llu, %llu updates: %s\n", r.seconds,
                     r.accuracy, static_cast<unsigned long long>(r.version),
                     static_cast<unsigned long long>(r.updates), r.reached ? "reached" : "missed");
        (side == 0 ? appfl : shoal_runs)[alg].push_back(r);
      }
    }
  }
  std::printf("%-11s %-6s %-24s %-8s %-22s %-18s %s\n", "algorithm", "system", "seconds per seed",
              "reached", "s min / median / max", "updates (median)", "Shoal / APPFL per seed");
  double compass_ratio = 0;
  bool compass_ok = false;
  for (const std::string& alg : o.algorithms) {
    std::vector<double> ratios;
    for (int side = 0; side < 2; ++side) {
      const auto& runs = side == 0 ? appfl[alg] : shoal_runs[alg];
      std::vector<double> secs, ups;
      std::string per;
      int reached = 0;
      for (size_t i = 0; i < runs.size(); ++i) {
        secs.push_back(runs[i].seconds);
        ups.push_back(static_cast<double>(runs[i].updates));
        if (i) per += ' ';
        per += FormatNumber("%.1f", runs[i].seconds);
        if (!runs[i].reached) per += '*';
        reached += runs[i].reached ? 1 : 0;
        if (side == 1) ratios.push_back(runs[i].seconds / appfl[alg][i].seconds);
      }
      const bool all = reached == static_cast<int>(runs.size());
      std::string ratio_text = "-";
      if (side == 1) {
        const bool both = all && std::all_of(appfl[alg].begin(), appfl[alg].end(),
                                             [](const RunResult& r) { return r.reached; });
        const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
        ratio_text = both ? FormatNumber("%.3f", Median(ratios)) + " [" +
                                FormatNumber("%.3f", *lo) + ", " + FormatNumber("%.3f", *hi) + "]"
                          : "missed";
        if (alg == "fedcompass") {
          compass_ok = both;
          compass_ratio = Median(ratios);
        }
      }
      std::printf("%-11s %-6s %-24s %-8s %-22s %-18.0f %s\n", alg.c_str(),
                  side == 0 ? "APPFL" : "Shoal", per.c_str(),
                  (std::to_string(reached) + "/" + std::to_string(runs.size())).c_str(),
                  Range(secs).c_str(), Median(ups), ratio_text.c_str());
    }
  }
  std::printf(
      "(* missed the target in that seed: the time is when the run stopped; ratio: "
      "Shoal's time / APPFL's in the same seed, median [min, max]; lower is better)\n\n");
  std::printf("RESULT fl_appfl_fidelity ratio=%s (events identical / events)\n",
              FormatNumber("%.3f", fid.events ? double(fid.same) / double(fid.events) : 0).c_str());
  if (std::find(o.algorithms.begin(), o.algorithms.end(), "fedcompass") == o.algorithms.end()) {
    return 0;
  }
  if (compass_ok) {
    std::printf(
        "RESULT fl_appfl ratio=%s (Shoal FedCompass / APPFL FedCompass, time to %.2f, "
        "median of %d seeds; target <= 1)\n",
        FormatNumber("%.3f", compass_ratio).c_str(), o.target, o.seeds);
  } else {
    std::printf("RESULT fl_appfl ratio=0 (missed: a FedCompass run did not reach %.2f)\n",
                o.target);
  }
  return 0;
}
