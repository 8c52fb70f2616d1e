// bench-robust: each robust aggregator (shoal/fl/robust) on K updates of N f32 params (default
// 64 ResNet-18-sized updates, 11,689,512 params: 3 GB) read in place, on all threads, against two
// anchors measured in the same run: the plain fold (FoldPool: the mean, what a non-robust round
// costs) and numpy 2 (the project venv's, on its bundled OpenBLAS; bench/robust_anchor.py: the
// median as np.median and as np.sort's middle, the trimmed mean from np.partition and from
// np.sort, Gram-matrix Krum; the faster form of each rule is the anchor, and the table names
// it), on the same thread count, with OpenBLAS's own CPU detection (bench/openblas_env.h). numpy
// runs first, in its own process, so the two never hold their 3 GB at once. Figures: seconds
// min/median/max over --reps runs, GB/s of update bytes read (K * N * 4 / median seconds), and
// the ratio numpy median / Shoal median.
//
//   bench-robust [--params N (11689512)] [--updates K (64)] [--reps R (3)] [--threads T (all)]
//                [--beta B (0.1)] [--f F (K/4 - 1)] [--no-numpy] [--only RULE]
//
// Ends with `RESULT robust ratio=<r>`: the smaller of the median's and the trimmed mean's ratio
// to numpy (the target is >= 10).
#include "shoal/fl/robust/robust.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "openblas_env.h"
#include "project_python.h"
#include "shoal/fl/kernels/fold_pool.h"

namespace {

using shoal::aggregator::FoldPool;
using shoal::aggregator::RobustAggregator;
using shoal::aggregator::RobustInput;
using shoal::aggregator::UpdateRef;
using Clock = std::chrono::steady_clock;

struct Stats {
  double min = 0, med = 0, max = 0;
};

Stats Summarise(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

// numpy's seconds per run for one form of a rule.
struct NumpyForm {
  std::string form;
  std::vector<double> seconds;
};

// Each rule's forms as the anchor printed them; *peer: numpy's version and BLAS.
std::map<std::string, std::vector<NumpyForm>> RunNumpy(size_t n, size_t k, int reps,
                                                       unsigned threads, double beta, size_t f,
                                                       std::string* peer) {
  std::map<std::string, std::vector<NumpyForm>> out;
  const std::string cmd =
      shoal::bench::OpenBlasAnchorEnv(static_cast<int>(threads)) + shoal::bench::ProjectPython() +
      " " + SHOAL_ROBUST_ANCHOR_PY + " --params " + std::to_string(n) + " --updates " +
      std::to_string(k) + " --reps " + std::to_string(reps) + " --threads " +
      std::to_string(threads) + " --beta " + std::to_string(beta) + " --f " + std::to_string(f);
  std::fprintf(stderr, "bench-robust: anchor: %s\n", cmd.c_str());
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    char a[64] = {}, form[64] = {}, b[2048] = {};
    if (std::sscanf(line, "ANCHOR numpy peer=%2047[^\n]", b) == 1) {
      *peer = b;
    } else if (std::sscanf(line, "ANCHOR numpy %63s form=%63s rep_s=%2047s", a, form, b) == 3) {
      NumpyForm nf{form, {}};
      std::stringstream ss(b);
      std::string tok;
      while (std::getline(ss, tok, ',')) nf.seconds.push_back(std::atof(tok.c_str()));
      out[a].push_back(std::move(nf));
    }
  }
  pclose(p);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 11689512, k = 64, f = 0;
  int reps = 3;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  double beta = 0.1;
  bool numpy = true;
  std::string only;  // run this rule (and the fold) only
  shoal::bench::Args args(
      "bench-robust [--params N] [--updates K] [--reps R] [--threads T] [--beta B] [--f F] "
      "[--no-numpy] [--only RULE]");
  args.FoldSizes(&n, &k, &reps).Option("--threads", &threads).Option("--beta", &beta);
  args.Option("--f", &f).Option("--only", &only).Switch("--no-numpy", &numpy, false);
  if (!args.Parse(argc, argv)) return 2;
  if (f == 0) f = k / 4 > 1 ? k / 4 - 1 : 0;
  if (k < 2 * f + 3 || reps < 1 || n == 0) {
    std::fprintf(stderr, "bench-robust: needs K > 2f + 2, R >= 1, N >= 1\n");
    return 2;
  }

  std::string np_peer = "numpy missing";
  std::map<std::string, std::vector<NumpyForm>> np;
  if (numpy) np = RunNumpy(n, k, reps, threads, beta, f, &np_peer);

  std::fprintf(stderr, "bench-robust: %zu updates x %zu f32 = %.2f GB\n", k, n,
               static_cast<double>(k * n * 4) / 1e9);
  std::vector<std::vector<float>> data(k, std::vector<float>(n));
  {
    // Values do not change the cost of the sorting network (it is data-oblivious); random so
    // the Krum and Flag arithmetic is ordinary.
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (auto& row : data) {
      for (auto& v : row) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        v = static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t{1} << 23)) * 0x1p-22f;
      }
    }
  }
  std::vector<UpdateRef> refs;
  refs.reserve(k);
  for (const auto& row : data) refs.push_back({row.data(), shoal::aggregator::DType::kF32, n});
  RobustInput in{refs};
  std::vector<float> out(n);
  RobustAggregator agg(threads);
  FoldPool fold(threads);

  const double bytes = static_cast<double>(k) * static_cast<double>(n) * 4;
  struct Row {
    std::string rule, params;
    Stats shoal;
  };
  std::vector<Row> rows;
  auto time = [&](const std::string& rule, const std::string& params, auto&& fn) {
    if (!only.empty() && rule != only && rule != "fold") return;
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      fn();
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    rows.push_back({rule, params, Summarise(t)});
    std::fprintf(stderr, "bench-robust: %s %.3f s\n", rule.c_str(), rows.back().shoal.med);
  };
  auto must = [](const auto& r) {
    if (!r.ok()) {
      std::fprintf(stderr, "bench-robust: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
  };
  time("fold", "mean via FoldPool", [&] {
    std::fill(out.begin(), out.end(), 0.0f);
    for (const auto& row : data)
      fold.Fold(out.data(), row.data(), refs[0].dtype, n, 1.0f / static_cast<float>(k));
  });
  time("median", "", [&] { must(agg.Median(in, out.data())); });
  char p[128];
  std::snprintf(p, sizeof p, "beta=%.2f", beta);
  time("trimmed", p, [&] { must(agg.TrimmedMean(in, beta, out.data())); });
  std::snprintf(p, sizeof p, "f=%zu m=%zu", f, k - f);
  time("krum", p, [&] { must(agg.MultiKrum(in, f, 0, out.data())); });
  RobustInput clipped = in;
  clipped.clip_norm = 1000;
  time("clipped", "tau=1000", [&] { must(agg.ClippedMean(clipped, out.data())); });
  time("flag", "rank=1", [&] { must(agg.Flag(in, {}, out.data())); });

  std::printf("bench-robust: %zu updates x %zu f32 params (%.2f GB), %u threads; anchor: %s\n", k,
              n, bytes / 1e9, threads, numpy ? np_peer.c_str() : "numpy not run (--no-numpy)");
  std::printf("%-8s %-18s %26s %8s %26s %-13s %9s %9s\n", "rule", "params", "shoal s min/med/max",
              "GB/s", "numpy s min/med/max", "numpy form", "x numpy", "x fold");
  const double fold_med = rows[0].shoal.med;
  double result = 0;
  bool have_result = false;
  for (const Row& r : rows) {
    char shoal_s[64], np_s[64] = "-", ratio[32] = "-";
    std::string form = "-";
    std::snprintf(shoal_s, sizeof shoal_s, "%.3f/%.3f/%.3f", r.shoal.min, r.shoal.med, r.shoal.max);
    // The rule's faster numpy form (lower median seconds) is its anchor.
    const NumpyForm* best = nullptr;
    if (auto it = np.find(r.rule); it != np.end()) {
      for (const NumpyForm& nf : it->second) {
        if (nf.seconds.empty()) continue;
        if (!best || Summarise(nf.seconds).med < Summarise(best->seconds).med) best = &nf;
      }
    }
    if (best != nullptr) {
      const Stats s = Summarise(best->seconds);
      form = best->form;
      std::snprintf(np_s, sizeof np_s, "%.3f/%.3f/%.3f", s.min, s.med, s.max);
      const double q = s.med / r.shoal.med;
      std::snprintf(ratio, sizeof ratio, "%.1f", q);
      if (r.rule == "median" || r.rule == "trimmed") {
        result = have_result ? std::min(result, q) : q;
        have_result = true;
      }
    }
    std::printf("%-8s %-18s %26s %8.2f %26s %-13s %9s %9.2f\n", r.rule.c_str(), r.params.c_str(),
                shoal_s, bytes / r.shoal.med / 1e9, np_s, form.c_str(), ratio,
                r.shoal.med / fold_med);
  }
  std::printf(
      "(x numpy: numpy median s / Shoal median s, numpy's faster form; x fold: Shoal median s / "
      "the fold's)\n");
  for (const auto& [rule, forms] : np) {  // every form measured, the slower ones too
    if (forms.size() < 2) continue;
    std::printf("numpy %s forms, median s:", rule.c_str());
    for (const NumpyForm& nf : forms) {
      std::printf(" %s %.3f", nf.form.c_str(), Summarise(nf.seconds).med);
    }
    std::printf("\n");
  }
  if (have_result) {
    std::printf("RESULT robust ratio=%.2f\n", result);
  } else {
    std::printf("RESULT robust ratio=nan (numpy missing)\n");
  }
  return 0;
}
