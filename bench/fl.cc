// bench-fl: time to a target accuracy on Fashion-MNIST (16 clients, Dirichlet(0.5) non-IID
// partition, lognormal client speeds) through a real shoald and shoal-client, for each
// algorithm the coordinator runs (FedAvg, FedAsync, FedBuff, FedFix, FedCompass), over several
// seeds (the partition, the client speeds, the trainers and the initial model all follow the
// seed; every algorithm sees the same ones).
//
// The anchor is FedAvg as a user would run it on Shoal, not waiting for the slowest of the 16:
// "fedavg" with a quorum (spec.clients.quorum: half the clients) and a round deadline
// (spec.deadlines.round: 1 s, just above a median client's round of ~0.7 s; a round commits at
// its deadline once the quorum has reported, or when all 16 have), and "fedavg-quorum" with the
// quorum alone (a round commits at its quorum-th update). FedAvg waiting for every client
// ("fedavg-all", the old anchor) runs too; the anchor is the fastest of the three (median over
// the seeds) that reached the target in every seed. Each algorithm's time is divided by the
// anchor's in the same seed: median and range over the seeds, lower is better. An algorithm
// that misses the target in any seed (the job never done, or its final model below the target)
// gets no ratio. The RESULT is FedCompass's median ratio, and counts only when FedCompass
// reached the target in every seed (else ratio=0, missed).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "shoald_fixture.h"

using namespace shoal::testing;

namespace {

struct Variant {
  std::string label;      // as printed
  std::string algorithm;  // the manifest's algorithm
  bool anchor = false;    // a FedAvg configuration the anchor is picked from
};

struct Run {
  double seconds = 0;
  double accuracy = 0;
  uint64_t version = 0;
  bool reached = false;
  // The first evaluated version that scored the target, and when (-1: none did).
  double first_seconds = -1, first_accuracy = 0;
  uint64_t first_version = 0;
};

struct Options {
  double target = 0.82, max_seconds = 120;
  int seeds = 3;
  uint64_t first_seed = 1;
  uint32_t quorum = 8;          // FedAvg's spec.clients.quorum (of 16)
  std::string deadline = "1s";  // FedAvg's spec.deadlines.round
  std::string log_dir;    // each run's shoal-client output, when set
  std::vector<std::string> only;  // labels to run (empty: all)
};

std::string Manifest(const std::string& name, const Variant& v, const Options& o,
                     uint64_t seed) {
  std::string params, clients = "  clients: {expected: 16}\n", deadlines;
  if (v.algorithm == "fedbuff") params = "    params: {k: 8}\n";
  // FedFix's period is the user's choice (the paper leaves it open): about one median client's
  // round here (100 steps x the median step time x the time scale).
  if (v.algorithm == "fedfix") params = "    params: {period: 1.0}\n";
  if (v.label == "fedavg" || v.label == "fedavg-quorum") {
    clients = "  clients: {expected: 16, quorum: " + std::to_string(o.quorum) + "}\n";
  }
  if (v.label == "fedavg") deadlines = "  deadlines: {round: " + o.deadline + "}\n";
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm:\n    name: " + v.algorithm + "\n" + params +
         "  model: {architecture: mlp, hidden: 128, seed: " + std::to_string(seed) + "}\n" +
         clients + deadlines + "  stop: {rounds: 2000, accuracy: " + std::to_string(o.target) +
         "}\n"
         "  training: {localSteps: 100, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 8, maxLeaves: 4, maxStaleness: 50}\n";
}

bool RunOne(const Variant& v, const Options& o, uint64_t seed, Run* r) {
  Shoald shoald;
  if (!shoald.Start()) {
    std::fprintf(stderr, "shoald did not start:\n%s", shoald.Log().c_str());
    return false;
  }
  const std::string job = "bench-" + v.label;
  auto d = shoald.Deploy(Manifest(job, v, o, seed));
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy %s: %s\n", v.label.c_str(), d.err.c_str());
    return false;
  }
  const std::string cmd = "SHOAL_TOKEN=" + shoald.CreateToken("fl-client", "", job) + " " +
                          BinDir() + "/shoal-client --server http://127.0.0.1:" +
                          std::to_string(shoald.port()) + " --job " + job +
                          " --clients 16 --partition dirichlet:0.5 --speeds lognormal:1.0"
                          " --seed " + std::to_string(seed) + " --max-seconds " +
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
  shoald.Stop();
  if (!o.log_dir.empty()) {
    std::ofstream(o.log_dir + "/" + v.label + "-seed" + std::to_string(seed) + ".log") << out;
  }
  std::smatch m;
  bool done = false;
  if (std::regex_search(out, m, std::regex("job done after ([0-9.]+) s"))) {
    r->seconds = std::stod(m[1]);
    done = true;
  } else if (std::regex_search(
                 out, m, std::regex("(?:stopped at --max-seconds|clients stopped) after ([0-9.]+) s"))) {
    r->seconds = std::stod(m[1]);
  } else {
    r->seconds = o.max_seconds;
  }
  if (std::regex_search(out, m, std::regex("final accuracy ([0-9.]+) .*\\(version ([0-9]+)"))) {
    r->accuracy = std::stod(m[1]);
    r->version = std::stoull(m[2]);
  }
  r->reached = done && r->accuracy >= o.target;
  const std::regex eval_line("version ([0-9]+)  accuracy ([0-9.]+)  loss [0-9.]+  t=([0-9.]+)s");
  for (std::sregex_iterator it(out.begin(), out.end(), eval_line), end; it != end; ++it) {
    if (std::stod((*it)[2]) >= o.target) {
      r->first_version = std::stoull((*it)[1]);
      r->first_accuracy = std::stod((*it)[2]);
      r->first_seconds = std::stod((*it)[3]);
      break;
    }
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--target") o.target = std::stod(argv[++i]);
    else if (a == "--max-seconds") o.max_seconds = std::stod(argv[++i]);
    else if (a == "--seeds") o.seeds = std::stoi(argv[++i]);
    else if (a == "--first-seed") o.first_seed = std::stoull(argv[++i]);
    else if (a == "--fedavg-quorum") o.quorum = static_cast<uint32_t>(std::stoul(argv[++i]));
    else if (a == "--fedavg-deadline") o.deadline = argv[++i];
    else if (a == "--log-dir") o.log_dir = argv[++i];
    else if (a == "--only") {
      std::stringstream ss(argv[++i]);
      for (std::string l; std::getline(ss, l, ',');) o.only.push_back(l);
    }
  }
  if (o.seeds < 1 || o.quorum < 1 || o.quorum > 16) {
    std::fprintf(stderr, "bench-fl: --seeds must be >= 1 and --fedavg-quorum in 1..16\n");
    return 1;
  }
  std::vector<Variant> variants = {{"fedavg", "fedavg", true},
                                   {"fedavg-quorum", "fedavg", true},
                                   {"fedavg-all", "fedavg", true},
                                   {"fedasync", "fedasync"},
                                   {"fedbuff", "fedbuff"},
                                   {"fedfix", "fedfix"},
                                   {"fedcompass", "fedcompass"}};
  if (!o.only.empty()) {
    std::erase_if(variants, [&](const Variant& v) {
      return std::find(o.only.begin(), o.only.end(), v.label) == o.only.end();
    });
  }
  const size_t total = variants.size() * o.seeds;
  std::vector<std::vector<Run>> runs(variants.size(), std::vector<Run>(o.seeds));
  size_t done = 0;
  // Seed-major, so a partial run still compares every algorithm on the same seeds.
  for (int k = 0; k < o.seeds; ++k) {
    const uint64_t seed = o.first_seed + k;
    for (size_t i = 0; i < variants.size(); ++i) {
      ++done;
      std::fprintf(stderr, "[%zu/%zu] seed %llu: %s to accuracy %.2f (at most %.0f s) ...\n",
                   done, total, static_cast<unsigned long long>(seed), variants[i].label.c_str(),
                   o.target, o.max_seconds);
      Run& r = runs[i][k];
      if (!RunOne(variants[i], o, seed, &r)) return 1;
      std::fprintf(stderr, "        %.1f s, final accuracy %.4f (version %llu): %s\n", r.seconds,
                   r.accuracy, static_cast<unsigned long long>(r.version),
                   r.reached ? "reached" : "missed");
    }
  }

  // The anchor: the FedAvg configuration that reached the target in every seed, fastest by
  // median time.
  int anchor = -1;
  double anchor_median = 0;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (!variants[i].anchor) continue;
    std::vector<double> t;
    bool all = true;
    for (const Run& r : runs[i]) {
      all = all && r.reached;
      t.push_back(r.seconds);
    }
    if (!all) continue;
    const double med = Median(t);
    if (anchor < 0 || med < anchor_median) {
      anchor = static_cast<int>(i);
      anchor_median = med;
    }
  }

  std::printf("bench-fl: Fashion-MNIST, MLP 784-128-10, 16 clients, dirichlet:0.5, lognormal:1.0 "
              "speeds, time scale 0.2 (a median client's 100 steps: ~1 s), target accuracy "
              "%.2f, at most %.0f s, seeds %llu..%llu\n",
              o.target, o.max_seconds, static_cast<unsigned long long>(o.first_seed),
              static_cast<unsigned long long>(o.first_seed + o.seeds - 1));
  std::printf("fedavg: quorum %u of 16, round deadline %s (a round commits at its deadline once "
              "the quorum reported, or when all 16 did); fedavg-quorum: quorum %u, no deadline "
              "(commits at the quorum-th update); late updates are refused as stale and their "
              "clients take the new model; fedavg-all: every round waits for all 16\n",
              o.quorum, o.deadline.c_str(), o.quorum);
  std::printf("reached: the job reported the target and its final model scores it; ratio: time / "
              "the anchor's time in the same seed, median [min, max]; lower is better\n");
  std::printf("%-13s %-26s %-23s %-8s %9s %-24s\n", "algorithm", "seconds per seed",
              "final accuracy per seed", "reached", "median s", "ratio / anchor");
  for (size_t i = 0; i < variants.size(); ++i) {
    std::vector<std::string> secs, accs;
    std::vector<double> t;
    int reached = 0;
    for (const Run& r : runs[i]) {
      secs.push_back(Fmt("%.1f", r.seconds) + (r.reached ? "" : "*"));
      accs.push_back(Fmt("%.4f", r.accuracy));
      t.push_back(r.seconds);
      reached += r.reached ? 1 : 0;
    }
    std::string ratio;
    if (reached != o.seeds) {
      ratio = "missed";
    } else if (anchor < 0) {
      ratio = "no anchor";
    } else if (static_cast<int>(i) == anchor) {
      ratio = "1 (anchor)";
    } else {
      std::vector<double> q;
      for (int k = 0; k < o.seeds; ++k) q.push_back(runs[i][k].seconds / runs[anchor][k].seconds);
      ratio = Fmt("%.3f", Median(q)) + " [" + Fmt("%.3f", *std::min_element(q.begin(), q.end())) +
              ", " + Fmt("%.3f", *std::max_element(q.begin(), q.end())) + "]";
    }
    std::printf("%-13s %-26s %-23s %-8s %9.1f %-24s\n", variants[i].label.c_str(),
                Join(secs, " ").c_str(), Join(accs, " ").c_str(),
                (std::to_string(reached) + "/" + std::to_string(o.seeds)).c_str(), Median(t),
                ratio.c_str());
  }
  std::printf("(* missed the target in that seed)\n");
  for (size_t i = 0; i < variants.size(); ++i) {
    for (int k = 0; k < o.seeds; ++k) {
      const Run& r = runs[i][k];
      if (r.reached) continue;
      std::printf("  %s seed %llu: ", variants[i].label.c_str(),
                  static_cast<unsigned long long>(o.first_seed + k));
      if (r.first_seconds >= 0) {
        std::printf("version %llu scored %.4f at %.1f s, but the job's final model (version "
                    "%llu) scores %.4f\n",
                    static_cast<unsigned long long>(r.first_version), r.first_accuracy,
                    r.first_seconds, static_cast<unsigned long long>(r.version), r.accuracy);
      } else {
        std::printf("no evaluated version scored %.2f (final model %.4f, stopped at %.1f s)\n", o.target, r.accuracy,
                    r.seconds);
      }
    }
  }
  if (anchor < 0) {
    std::printf("anchor: no FedAvg configuration reached %.2f in every seed\n", o.target);
  } else {
    std::printf("anchor: %s (median %.1f s)\n", variants[anchor].label.c_str(), anchor_median);
  }

  int compass = -1;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].label == "fedcompass") compass = static_cast<int>(i);
  }
  if (compass < 0) {
    std::printf("RESULT fl ratio=0 (missed: fedcompass not run)\n");
    return 0;
  }
  int compass_reached = 0;
  for (const Run& r : runs[compass]) compass_reached += r.reached ? 1 : 0;
  if (compass_reached != o.seeds) {
    std::printf("RESULT fl ratio=0 (missed: fedcompass reached %.2f in %d of %d seeds)\n",
                o.target, compass_reached, o.seeds);
  } else if (anchor < 0) {
    std::printf("RESULT fl ratio=0 (missed: no FedAvg anchor reached %.2f in every seed)\n",
                o.target);
  } else {
    std::vector<double> q;
    for (int k = 0; k < o.seeds; ++k) {
      q.push_back(runs[compass][k].seconds / runs[anchor][k].seconds);
    }
    std::printf("RESULT fl ratio=%.3f\n", Median(q));
  }
  return 0;
}
