// bench-fl: time to a target accuracy on Fashion-MNIST through a real shoald and shoal-client,
// for each algorithm the coordinator runs (FedAvg, FedAsync, FedBuff, FedFix, FedCompass), over
// several heterogeneity settings and several seeds (the partition, the client speeds, the
// trainers and the initial model all follow the seed; every algorithm sees the same ones).
//
// Settings (--settings): "fmnist16", 16 clients, Dirichlet(0.5) labels, lognormal(1.0) step
// times (34x between the fastest and the slowest client); and the FedCompass paper's
// cross-silo kind, few clients of strongly different computing power: "silo5-class", 5 clients
// holding 5 classes each with exponential step times, and "silo5-dirichlet", 5 clients,
// Dirichlet(0.5) with normal step times.
//
// FedAvg's anchor is FedAvg as a user would run it on Shoal, not waiting for the slowest client:
// "fedavg" with a quorum (half the clients) and a 1 s round deadline (a round commits at its
// deadline once the quorum has reported, or when all have), "fedavg-quorum" with the quorum
// alone, and "fedavg-all" waiting for every client; the anchor is the fastest of the three
// (median over the seeds) that reached the target in every seed. "fedbuff-appfl" is FedBuff
// as APPFL runs it in the FedCompass paper's comparison, each update moving the model by
// alpha s(u) / N like FedCompass's (eta_g = alpha K / N): it isolates FedCompass's per-update
// weight from its scheduling. "first" is the fastest variant of the setting that reached the
// target in every seed. Each time is divided by the
// anchor's and by the first's in the same seed: median and range over the seeds, lower is
// better. An algorithm that misses the target in any seed (the job never done, or its final
// model below the target) gets no ratio.
//
// RESULT lines: "fl" is FedCompass / the FedAvg anchor in fmnist16 (as before); "fl_<setting>"
// is FedCompass / the first in that setting (1 when FedCompass is first; the target is
// <= 1.1). Either is 0 (missed) when FedCompass did not reach the target in every seed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "run_stats.h"
#include "shoal/common/format_number.h"
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;

using shoal::FormatNumber;
using shoal::bench::Median;

namespace {

struct Setting {
  std::string name;
  int clients = 16;
  std::string partition, speeds;
  double target = 0.82;
  std::string about;  // printed in the header
};

const std::vector<Setting>& AllSettings() {
  static const std::vector<Setting> kSettings = {
      {"fmnist16", 16, "dirichlet:0.5", "lognormal:1.0", 0.82,
       "16 clients, Dirichlet(0.5) labels, lognormal(sigma 1) step times"},
      {"silo5-class", 5, "classes:5", "exponential:0.05", 0.75,
       "5 clients, 5 classes each, exponential step times (mean 0.05 s)"},
      {"silo5-dirichlet", 5, "dirichlet:0.5", "normal:0.05,0.03", 0.80,
       "5 clients, Dirichlet(0.5) labels, normal step times (0.05 +- 0.03 s)"},
  };
  return kSettings;
}

struct Variant {
  std::string label;      // as printed
  std::string algorithm;  // the manifest's algorithm
  bool anchor = false;    // a FedAvg configuration the anchor is picked from
};

struct Run {
  double seconds = 0;
  double accuracy = 0;
  uint64_t version = 0;
  uint64_t updates = 0;  // updates the job accepted
  bool reached = false;
  // The first evaluated version that scored the target, and when (-1: none did).
  double first_seconds = -1, first_accuracy = 0;
  uint64_t first_version = 0;
};

struct Options {
  double max_seconds = 60;
  double target = 0;  // 0: each setting's own
  int seeds = 3;
  uint64_t first_seed = 1;
  std::string deadline = "1s";        // FedAvg's spec.deadlines.round
  std::string log_dir;                // each run's shoal-client output, when set
  std::string shoald;                 // the shoald binary (empty: the build's)
  std::vector<std::string> only;      // labels to run (empty: all)
  std::vector<std::string> settings;  // settings to run (empty: all)
};

uint32_t Quorum(const Setting& s) { return static_cast<uint32_t>((s.clients + 1) / 2); }

std::string Manifest(const std::string& name, const Variant& v, const Setting& st, const Options& o,
                     double target, uint64_t seed) {
  const std::string n = std::to_string(st.clients);
  std::string params, clients = "  clients: {expected: " + n + "}\n", deadlines;
  if (v.algorithm == "fedbuff") params = "    params: {k: " + std::to_string(Quorum(st)) + "}\n";
  // FedBuff as APPFL (the FedCompass authors' framework) runs it in the paper's comparison:
  // every update moves the model by alpha s(u) / N, as FedCompass's do (eta_g = alpha K / N).
  if (v.label == "fedbuff-appfl") {
    params = "    params: {k: " + std::to_string(Quorum(st)) +
             ", eta: " + FormatNumber("%.6f", 0.9 * Quorum(st) / st.clients) + "}\n";
  }
  // FedFix's period is the user's choice (the paper leaves it open): about one median client's
  // round here (100 steps x the median step time x the time scale).
  if (v.algorithm == "fedfix") params = "    params: {period: 1.0}\n";
  if (v.label == "fedavg" || v.label == "fedavg-quorum") {
    clients = "  clients: {expected: " + n + ", quorum: " + std::to_string(Quorum(st)) + "}\n";
  }
  if (v.label == "fedavg") deadlines = "  deadlines: {round: " + o.deadline + "}\n";
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm:\n    name: " + v.algorithm + "\n" + params +
         "  model: {architecture: mlp, hidden: 128, seed: " + std::to_string(seed) + "}\n" +
         clients + deadlines + "  stop: {rounds: 2000, accuracy: " + std::to_string(target) +
         "}\n"
         "  training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 8, maxLeaves: 4, maxStaleness: 50}\n";
}

bool RunOne(const Variant& v, const Setting& st, const Options& o, double target, uint64_t seed,
            Run* r) {
  Shoald shoald;
  Shoald::Options options;
  options.binary = o.shoald;
  if (!shoal::bench::StartShoald(shoald, options)) return false;
  const std::string job = "bench-" + v.label;
  auto d = shoald.Deploy(Manifest(job, v, st, o, target, seed));
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy %s: %s\n", v.label.c_str(), d.err.c_str());
    return false;
  }
  const std::string cmd =
      "SHOAL_TOKEN=" + shoald.CreateToken("fl-client", "", job) + " " + BinDir() +
      "/shoal-client --server http://127.0.0.1:" + std::to_string(shoald.port()) + " --job " + job +
      " --clients " + std::to_string(st.clients) + " --partition " + st.partition + " --speeds " +
      st.speeds + " --seed " + std::to_string(seed) + " --max-seconds " +
      std::to_string(o.max_seconds) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    std::fprintf(stderr, "cannot run shoal-client\n");
    return false;
  }
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  if (!o.log_dir.empty()) {
    // The client's output and the job's final status (versions with their update counts; for
    // FedCompass each client's speed estimate and assignment), for a run's post-mortem.
    const std::string base =
        o.log_dir + "/" + st.name + "-" + v.label + "-seed" + std::to_string(seed);
    std::ofstream(base + ".log") << out;
    std::ofstream(base + ".status.json") << shoald.Api("GET", "/v1/jobs/" + job).body;
  }
  shoald.Stop();
  std::smatch m;
  bool done = false;
  if (std::regex_search(out, m, std::regex("job done after ([0-9.]+) s"))) {
    r->seconds = std::stod(m[1]);
    done = true;
  } else if (std::regex_search(
                 out, m,
                 std::regex("(?:stopped at --max-seconds|clients stopped) after ([0-9.]+) s"))) {
    r->seconds = std::stod(m[1]);
  } else {
    r->seconds = o.max_seconds;
  }
  if (std::regex_search(out, m, std::regex(" ([0-9]+) updates accepted"))) {
    r->updates = std::stoull(m[1]);
  }
  if (std::regex_search(out, m, std::regex("final accuracy ([0-9.]+) .*\\(version ([0-9]+)"))) {
    r->accuracy = std::stod(m[1]);
    r->version = std::stoull(m[2]);
  }
  r->reached = done && r->accuracy >= target;
  const std::regex eval_line("version ([0-9]+)  accuracy ([0-9.]+)  loss [0-9.]+  t=([0-9.]+)s");
  for (std::sregex_iterator it(out.begin(), out.end(), eval_line), end; it != end; ++it) {
    if (std::stod((*it)[2]) >= target) {
      r->first_version = std::stoull((*it)[1]);
      r->first_accuracy = std::stod((*it)[2]);
      r->first_seconds = std::stod((*it)[3]);
      break;
    }
  }
  return true;
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

// Per seed: runs[i][k] / runs[ref][k]; "median [min, max]".
std::vector<double> Ratios(const std::vector<std::vector<Run>>& runs, size_t i, size_t ref) {
  std::vector<double> q;
  for (size_t k = 0; k < runs[i].size(); ++k)
    q.push_back(runs[i][k].seconds / runs[ref][k].seconds);
  return q;
}
std::string RatioText(const std::vector<double>& q) {
  return FormatNumber("%.3f", Median(q)) + " [" +
         FormatNumber("%.3f", *std::min_element(q.begin(), q.end())) + ", " +
         FormatNumber("%.3f", *std::max_element(q.begin(), q.end())) + "]";
}

bool ReachedAll(const std::vector<Run>& runs) {
  return std::all_of(runs.begin(), runs.end(), [](const Run& r) { return r.reached; });
}
double MedianSeconds(const std::vector<Run>& runs) {
  std::vector<double> t;
  for (const Run& r : runs) t.push_back(r.seconds);
  return Median(t);
}

// Runs every variant of one setting over the seeds, prints its table, and returns its RESULT
// lines (printed together at the end).
bool RunSetting(const Setting& st, const std::vector<Variant>& variants, const Options& o,
                std::vector<std::string>* results) {
  const double target = o.target > 0 ? o.target : st.target;
  const size_t total = variants.size() * o.seeds;
  std::vector<std::vector<Run>> runs(variants.size(), std::vector<Run>(o.seeds));
  size_t done = 0;
  // Seed-major, so a partial run still compares every algorithm on the same seeds.
  for (int k = 0; k < o.seeds; ++k) {
    const uint64_t seed = o.first_seed + k;
    for (size_t i = 0; i < variants.size(); ++i) {
      ++done;
      std::fprintf(stderr, "%s [%zu/%zu] seed %llu: %s to accuracy %.2f (at most %.0f s) ...\n",
                   st.name.c_str(), done, total, static_cast<unsigned long long>(seed),
                   variants[i].label.c_str(), target, o.max_seconds);
      Run& r = runs[i][k];
      if (!RunOne(variants[i], st, o, target, seed, &r)) return false;
      std::fprintf(stderr, "        %.1f s, %llu updates, final accuracy %.4f (version %llu): %s\n",
                   r.seconds, static_cast<unsigned long long>(r.updates), r.accuracy,
                   static_cast<unsigned long long>(r.version), r.reached ? "reached" : "missed");
    }
  }

  // The anchor: the FedAvg configuration that reached the target in every seed, fastest by
  // median time; "first": the fastest of all that did.
  int anchor = -1, first = -1;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (!ReachedAll(runs[i])) continue;
    const double med = MedianSeconds(runs[i]);
    if (variants[i].anchor && (anchor < 0 || med < MedianSeconds(runs[anchor]))) {
      anchor = static_cast<int>(i);
    }
    if (first < 0 || med < MedianSeconds(runs[first])) first = static_cast<int>(i);
  }

  std::printf(
      "\n== %s: %s; FedAvg quorum %u, FedBuff K %u; target accuracy %.2f, at most %.0f s, "
      "seeds %llu..%llu\n",
      st.name.c_str(), st.about.c_str(), Quorum(st), Quorum(st), target, o.max_seconds,
      static_cast<unsigned long long>(o.first_seed),
      static_cast<unsigned long long>(o.first_seed + o.seeds - 1));
  std::printf("%-13s %-22s %-30s %-7s %8s %9s %-17s %-24s %-24s\n", "algorithm", "seconds per seed",
              "final accuracy per seed", "reached", "median s", "updates", "first hit s",
              "ratio / anchor", "ratio / first");
  for (size_t i = 0; i < variants.size(); ++i) {
    std::vector<std::string> secs, accs;
    std::vector<double> ups;
    std::vector<std::string> hits;
    int reached = 0;
    for (const Run& r : runs[i]) {
      secs.push_back(FormatNumber("%.1f", r.seconds) + (r.reached ? "" : "*"));
      accs.push_back(FormatNumber("%.4f", r.accuracy));
      ups.push_back(static_cast<double>(r.updates));
      hits.push_back(r.first_seconds < 0 ? "-" : FormatNumber("%.1f", r.first_seconds));
      reached += r.reached ? 1 : 0;
    }
    std::string to_anchor = "missed", to_first = "missed";
    if (reached == o.seeds) {
      to_anchor = anchor < 0                      ? "no anchor"
                  : static_cast<int>(i) == anchor ? "1 (anchor)"
                                                  : RatioText(Ratios(runs, i, anchor));
      to_first = static_cast<int>(i) == first ? "1 (first)" : RatioText(Ratios(runs, i, first));
    }
    std::printf("%-13s %-22s %-30s %-7s %8.1f %9.0f %-17s %-24s %-24s\n", variants[i].label.c_str(),
                Join(secs, " ").c_str(), Join(accs, " ").c_str(),
                (std::to_string(reached) + "/" + std::to_string(o.seeds)).c_str(),
                MedianSeconds(runs[i]), Median(ups), Join(hits, " ").c_str(), to_anchor.c_str(),
                to_first.c_str());
  }
  std::printf(
      "(* missed the target in that seed; updates: accepted by the job, median; first hit: "
      "when the first evaluated version scored the target)\n");
  for (size_t i = 0; i < variants.size(); ++i) {
    for (int k = 0; k < o.seeds; ++k) {
      const Run& r = runs[i][k];
      if (r.reached) continue;
      std::printf("  %s seed %llu: ", variants[i].label.c_str(),
                  static_cast<unsigned long long>(o.first_seed + k));
      if (r.first_seconds >= 0) {
        std::printf(
            "version %llu scored %.4f at %.1f s, but the job's final model (version "
            "%llu) scores %.4f\n",
            static_cast<unsigned long long>(r.first_version), r.first_accuracy, r.first_seconds,
            static_cast<unsigned long long>(r.version), r.accuracy);
      } else {
        std::printf("no evaluated version scored %.2f (final model %.4f, stopped at %.1f s)\n",
                    target, r.accuracy, r.seconds);
      }
    }
  }
  std::printf("anchor: %s; first: %s\n",
              anchor < 0 ? "none (no FedAvg set-up reached the target in every seed)"
                         : variants[anchor].label.c_str(),
              first < 0 ? "none" : variants[first].label.c_str());

  int compass = -1;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].label == "fedcompass") compass = static_cast<int>(i);
  }
  if (compass < 0) return true;
  const bool compass_all = ReachedAll(runs[compass]);
  auto line = [&](const std::string& name, int ref, const char* what) {
    if (!compass_all) {
      int n = 0;
      for (const Run& r : runs[compass]) n += r.reached ? 1 : 0;
      results->push_back("RESULT " + name + " ratio=0 (missed: fedcompass reached " +
                         FormatNumber("%.2f", target) + " in " + std::to_string(n) + " of " +
                         std::to_string(o.seeds) + " seeds)");
    } else if (ref < 0) {
      results->push_back("RESULT " + name + " ratio=0 (missed: no " + what + ")");
    } else {
      results->push_back("RESULT " + name +
                         " ratio=" + FormatNumber("%.3f", Median(Ratios(runs, compass, ref))) +
                         " (fedcompass / " + variants[ref].label + ", median of " +
                         std::to_string(o.seeds) + " seeds)");
    }
  };
  if (st.name == "fmnist16") line("fl", anchor, "FedAvg anchor");
  line("fl_" + st.name, first, "algorithm reached the target in every seed");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  shoal::bench::Args args(
      "bench-fl [--settings fmnist16,silo5-class,silo5-dirichlet] [--seeds N] [--first-seed S] "
      "[--only LABELS] [--target ACC] [--max-seconds S] [--fedavg-deadline D] [--log-dir DIR] "
      "[--shoald PATH]");
  args.FlRuns(&o.seeds, &o.first_seed, &o.max_seconds)
      .Option("--target", &o.target)
      .Option("--fedavg-deadline", &o.deadline)
      .Option("--log-dir", &o.log_dir)
      .Option("--shoald", &o.shoald)
      .Option("--only", &o.only)
      .Option("--settings", &o.settings);
  if (!args.Parse(argc, argv)) return 2;
  if (o.seeds < 1) {
    std::fprintf(stderr, "bench-fl: --seeds must be >= 1\n");
    return 1;
  }
  std::vector<Setting> settings = AllSettings();
  if (!o.settings.empty()) {
    for (const std::string& s : o.settings) {
      if (std::none_of(settings.begin(), settings.end(),
                       [&](const Setting& x) { return x.name == s; })) {
        std::fprintf(stderr,
                     "bench-fl: --settings: unknown setting \"%s\" (fmnist16, "
                     "silo5-class, silo5-dirichlet)\n",
                     s.c_str());
        return 1;
      }
    }
    std::erase_if(settings, [&](const Setting& x) {
      return std::find(o.settings.begin(), o.settings.end(), x.name) == o.settings.end();
    });
  }
  std::vector<Variant> variants = {
      {"fedavg", "fedavg", true},     {"fedavg-quorum", "fedavg", true},
      {"fedavg-all", "fedavg", true}, {"fedasync", "fedasync"},
      {"fedbuff", "fedbuff"},         {"fedfix", "fedfix"},
      {"fedcompass", "fedcompass"},   {"fedbuff-appfl", "fedbuff"}};
  if (!o.only.empty()) {
    std::erase_if(variants, [&](const Variant& v) {
      return std::find(o.only.begin(), o.only.end(), v.label) == o.only.end();
    });
  }
  std::printf(
      "bench-fl: Fashion-MNIST, MLP 784-128-10, 100 local steps (FedCompass: Q_max 100, "
      "Q_min 20, lambda 1.5), batch 32, learning rate 0.1, time scale 0.2 (a client of "
      "0.05 s per step sleeps 1 s for 100 steps); fedavg: quorum + %s round deadline; "
      "fedavg-quorum: commits at the quorum-th update; fedavg-all: waits for every "
      "client; fedbuff: K = the quorum, eta_g 1 (its paper: 1/K of each update); fedbuff-appfl: "
      "eta_g = 0.9 K / N, so each update moves the model by 0.9 s(u) / N as FedCompass's do "
      "(how APPFL runs FedBuff in the FedCompass paper); fedasync: alpha 0.9 (its paper); "
      "fedcompass: alpha 0.9 s(u) / N of each update's delta; reached: the job reported the target "
      "and its final model scores it; "
      "ratio: time / the reference's time in the same seed, median [min, max]\n",
      o.deadline.c_str());
  std::vector<std::string> results;
  for (const Setting& st : settings) {
    if (!RunSetting(st, variants, o, &results)) return 1;
    std::fflush(stdout);
  }
  std::printf("\n");
  for (const std::string& r : results) std::printf("%s\n", r.c_str());
  return 0;
}
