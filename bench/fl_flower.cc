// bench-fl-flower: FedAvg's server side at scale, Shoal beside Flower 1.42 in the same run.
// The same model (a 784-H-10 MLP: H = 128, or H = 14704 for ResNet-18-sized updates, 11.69 M
// f32), the same update bytes and the same number of clients, through a real shoald (an FLJob
// running fedavg) and through Flower's own flower-superlink with a ServerApp running flwr's
// FedAvg strategy (bench/flower_app, submitted with `flwr run`). The clients are one load
// generator for both (bench/fl_flower_load.py): each client speaks its server's own protocol
// (Shoal's SDK; Flower's Fleet API through flwr's own SuperNode client pieces) with replies
// computed before the clock starts, W worker threads for N clients. Real SuperNodes would be a
// Python process each (1024 of them do not fit on this machine), and would add their CPU to
// the machine the servers share, so the load generator is Flower's best showing here too.
//
// Figures, per round (the median of rounds 2..R of a run; all rounds when R < 3):
//   server CPU s   utime+stime of every server process (shoald and its zygote and instances;
//                  flower-superlink, flower-superexec and flwr-serverapp), /proc
//   peak RSS       the largest sum of those processes' RSS, sampled every 20 ms over the run
//   commit         the last update's upload answered -> client 0 sees the next round's model
//   round          model available -> next model available
// Ratios are Shoal / Flower per run (lower is better for Shoal), min/median/max over --runs.
// Flower's settings: its defaults (5 MB array chunks, in-memory state, subprocess isolation,
// the grid's 3 s reply poll) but the nodes' heartbeat interval, 1800 s (its maximum).
// Targets at 1024 clients: CPU <= 0.2, commit <= 0.2, peak RSS <= 0.5.
//
//   bench-fl-flower [--runs N (3)] [--rounds R (3)] [--shoal-rounds R (10)] [--clients
//                   16,128,1024] [--resnet-clients 16 (0: none)] [--workers W (16)]
//                   [--flower-cap S (600)] [--quick] [--train] [--train-rounds 10] [--seeds 3]
//                   [--lr 0.05] [--epochs 1] [--train-clients 16]
// Shoal runs at least --shoal-rounds rounds (its rounds are short; CPU time ticks every 10 ms).
// --flower-cap: a Flower round whose uploads take longer is cut there, and its figures become
// lower bounds scaled from the uploads done (Flower's SuperLink at 1024 clients on 2 vCPUs
// handles a few updates a minute: a round would take hours).
// --quick: one run of 2 rounds at 16 clients, no ResNet-sized row (--train --quick: one seed,
// 2 rounds).
// --train: the real training run instead (bench/fl_flower_train.py): Fashion-MNIST, 16 clients,
// Dirichlet(0.5), the same partition, model, epochs and learning rate on both, each system's
// test accuracy per round for each seed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
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

struct Row {
  std::string model;  // "mlp" or "resnet18-sized"
  int hidden = 128;
  int clients = 16;
};

// One system's run of R rounds: the per-round medians.
struct Figures {
  bool ok = false;
  std::string error;
  double cpu_s = NAN, commit_s = NAN, round_s = NAN, rss_mb = NAN;
  double pulled_s = NAN, aggregate_s = NAN;  // Flower: last upload -> FedAvg has the replies
  double setup_s = NAN;
  int replies = -1;  // Flower: the replies FedAvg aggregated in the last round (errors left out)
  // Flower only: no round finished within --flower-cap; the figures are then lower bounds from
  // the cut round (CPU and round time scaled from the uploads done to all clients; commit none).
  bool partial = false;
  int uploads = 0;
  double window_s = NAN;
  std::string processes;
};

Figures FromJson(const Json& j) {
  Figures f;
  if (!j.is_object()) {
    f.error = "the load generator printed no result";
    return f;
  }
  f.ok = j.value("ok", false);
  f.error = j.value("error", std::string());
  if (j.contains("superlink_log")) f.error += "\n" + j["superlink_log"].get<std::string>();
  if (!f.ok) return f;
  Json rounds = j["rounds"];
  if (!rounds.empty() && rounds.back().value("partial", false)) {
    const Json cut = rounds.back();
    rounds.erase(rounds.size() - 1);
    if (rounds.empty()) {
      const int clients = j.value("clients", 0);
      f.partial = true;
      f.uploads = cut.value("uploads", 0);
      f.window_s = cut.value("window_s", 0.0);
      const double scale = f.uploads > 0 ? static_cast<double>(clients) / f.uploads : NAN;
      f.cpu_s = cut.value("cpu_s", 0.0) * scale;
      f.round_s = f.window_s * scale;
    }
  }
  std::vector<double> cpu, commit, round, pulled, agg;
  for (size_t i = rounds.size() >= 3 ? 1 : 0; i < rounds.size(); ++i) {
    cpu.push_back(rounds[i]["cpu_s"]);
    commit.push_back(rounds[i]["commit_s"]);
    round.push_back(rounds[i]["round_s"]);
    if (rounds[i].contains("replies_pulled_s")) {
      pulled.push_back(rounds[i]["replies_pulled_s"]);
      agg.push_back(rounds[i]["aggregate_s"]);
      f.replies = rounds[i].value("replies", -1);
    }
  }
  // CPU: the mean over the rounds (utime + stime tick every 10 ms; a Shoal round of 16 clients
  // spends about that much).
  if (!f.partial) {
    double cpu_sum = 0;
    for (double c : cpu) cpu_sum += c;
    f.cpu_s = cpu.empty() ? NAN : cpu_sum / static_cast<double>(cpu.size());
    f.commit_s = commit.empty() ? NAN : shoal::bench::Median(commit);
    f.round_s = round.empty() ? NAN : shoal::bench::Median(round);
  }
  if (!pulled.empty()) {
    f.pulled_s = shoal::bench::Median(pulled);
    f.aggregate_s = shoal::bench::Median(agg);
  }
  f.rss_mb = j.value("peak_rss_bytes", 0.0) / 1e6;
  f.setup_s = j.value("setup_s", 0.0);
  for (const auto& p : j.value("processes", Json::array())) {
    f.processes += (f.processes.empty() ? "" : ", ") + p.get<std::string>();
  }
  return f;
}

std::string Num(double v, int digits = 3) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

double g_flower_cap = 600;  // --flower-cap: a Flower round's upload phase is cut after this (s)

std::string Common(const Row& row, int rounds, int workers) {
  return " --clients " + std::to_string(row.clients) + " --rounds " + std::to_string(rounds) +
         " --hidden " + std::to_string(row.hidden) + " --workers " + std::to_string(workers);
}

Figures RunShoal(const Row& row, int rounds, int workers) {
  Shoald shoald;
  Shoald::Options opt;
  const double update_bytes = (784.0 * row.hidden + row.hidden + 10.0 * row.hidden + 10) * 4;
  // Rounds of updates may be held at once (a round's stay until its checkpoint is written).
  // (At least 256 MiB: shoald wants the pool larger than max_body_bytes; pages never touched
  // cost no memory.)
  opt.pool_bytes = std::max<uint64_t>(
      uint64_t{256} << 20, static_cast<uint64_t>((update_bytes + 4096) * (4 * row.clients + 64)));
  opt.max_body_bytes = uint64_t{128} << 20;
  Figures f;
  if (!shoal::bench::StartShoald(shoald, opt)) {
    f.error = "shoald did not start";
    return f;
  }
  const std::string job = "flower";
  auto d = shoald.Deploy("apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
                         "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, "
                         "hidden: " +
                         std::to_string(row.hidden) +
                         "}\n  clients: {expected: " + std::to_string(row.clients) +
                         "}\n  stop: {rounds: " + std::to_string(rounds + 1) + "}\n");
  if (d.exit_code != 0) {
    f.error = "deploy: " + d.err;
    return f;
  }
  shoald.WaitReady("fl." + job, 1, 30000);
  const std::string token = shoald.CreateToken("fl-client", "", job);
  f = FromJson(shoal::bench::RunJson(
      "bench-fl-flower",
      shoal::bench::SdkPython() + " " + kSource + "/bench/fl_flower_load.py --system shoal" +
          Common(row, rounds, workers) + " --server 127.0.0.1:" + std::to_string(shoald.port()) +
          " --job " + job + " --api-token " + token + " --root-pid " +
          std::to_string(shoald.pid())));
  if (!f.ok && std::getenv("SHOAL_BENCH_LOG")) std::fprintf(stderr, "%s", shoald.Log().c_str());
  shoald.Stop();
  return f;
}

Figures RunFlower(const Row& row, int rounds, int workers) {
  return FromJson(shoal::bench::RunJson(
      "bench-fl-flower",
      shoal::bench::SdkPython() + " " + kSource + "/bench/fl_flower_load.py --system flower" +
          Common(row, rounds, workers) + " --upload-cap " + Num(g_flower_cap, 0) +
          " --max-seconds " + Num(g_flower_cap * (rounds + 2) + 900, 0)));
}

std::string SpreadText(const shoal::bench::Spread& s) {
  return Num(s.min) + " / " + Num(s.median) + " / " + Num(s.max);
}

// --train: for each seed, Shoal (a job with the seed's initial model) then Flower starting from
// that same model; both clients train with bench/flower_app/shoal_flower_bench/train.py.
int RunTraining(int rounds, int seeds, int clients, double lr, int epochs) {
  const std::string common = " --rounds " + std::to_string(rounds) + " --clients " +
                             std::to_string(clients) + " --lr " + Num(lr, 4) + " --epochs " +
                             std::to_string(epochs) + " --batch 32 --alpha 0.5";
  std::vector<std::vector<double>> shoal_acc, flower_acc;
  int failures = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    const std::string init = "/tmp/bench-fl-flower-init-" + std::to_string(getpid()) + "-" +
                             std::to_string(seed) + ".npz";
    Shoald shoald;
    if (!shoal::bench::StartShoald(shoald)) return 1;
    const std::string job = "fmnist";
    auto d = shoald.Deploy(
        "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
        "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 128, seed: " +
        std::to_string(seed) + "}\n  clients: {expected: " + std::to_string(clients) +
        "}\n  stop: {rounds: " + std::to_string(rounds) +
        "}\n  training: {localSteps: 100, learningRate: " + Num(lr, 4) + ", batchSize: 32}\n");
    if (d.exit_code != 0) {
      std::fprintf(stderr, "deploy: %s\n", d.err.c_str());
      return 1;
    }
    shoald.WaitReady("fl." + job, 1, 30000);
    const std::string token = shoald.CreateToken("fl-client", "", job);
    const Json s = shoal::bench::RunJson(
        "bench-fl-flower", shoal::bench::SdkPython() + " " + kSource +
                               "/bench/fl_flower_train.py --system shoal" + common + " --seed " +
                               std::to_string(seed) +
                               " --server 127.0.0.1:" + std::to_string(shoald.port()) + " --job " +
                               job + " --api-token " + token + " --init-out " + init);
    shoald.Stop();
    const Json f = shoal::bench::RunJson(
        "bench-fl-flower", shoal::bench::SdkPython() + " " + kSource +
                               "/bench/fl_flower_train.py --system flower" + common + " --seed " +
                               std::to_string(seed) + " --init-npz " + init);
    std::remove(init.c_str());
    for (const auto& [j, out, name] :
         {std::tuple{&s, &shoal_acc, "Shoal"}, std::tuple{&f, &flower_acc, "Flower"}}) {
      if (!j->is_object() || !j->value("ok", false)) {
        ++failures;
        std::fprintf(stderr, "bench-fl-flower --train: %s, seed %d failed: %s\n", name, seed,
                     j->is_object() ? j->value("error", std::string()).c_str() : "no result");
        out->push_back({});
        continue;
      }
      out->push_back((*j)["accuracy"].get<std::vector<double>>());
      std::fprintf(stderr, "bench-fl-flower --train: %s, seed %d: %.0f s\n", name, seed,
                   j->value("seconds", 0.0));
    }
  }
  std::printf(
      "bench-fl-flower --train: FedAvg on Fashion-MNIST, %d clients, Dirichlet(0.5) labels, "
      "784-128-10 ReLU MLP, %d local epoch(s) of SGD (lr %s, batch 32), every client every "
      "round; seeds 1..%d (partition, initial model: Shoal's job's version 0, batch order). "
      "Shoal: shoald FLJob fedavg + the Python SDK's run_client; Flower 1.42: flower-superlink "
      "--simulation, %d simulated SuperNodes' ClientApps, flwr's FedAvg. Test accuracy of the "
      "global model after each round (round 0: the initial model)\n",
      clients, epochs, Num(lr, 4).c_str(), seeds, clients);
  std::printf("%5s", "round");
  for (int s = 1; s <= seeds; ++s) std::printf("  shoal s%d flower s%d", s, s);
  std::printf("  %10s %10s %10s %12s\n", "shoal mean", "flwr mean", "|diff|", "seed spread");
  double worst = 0;
  bool within = true;
  for (int r = 0; r <= rounds; ++r) {
    std::printf("%5d", r);
    std::vector<double> a, b;
    for (int s = 0; s < seeds; ++s) {
      const double x = r < static_cast<int>(shoal_acc[s].size()) ? shoal_acc[s][r] : NAN;
      const double y = r < static_cast<int>(flower_acc[s].size()) ? flower_acc[s][r] : NAN;
      std::printf("  %8s %9s", Num(x, 4).c_str(), Num(y, 4).c_str());
      a.push_back(x);
      b.push_back(y);
    }
    const auto sa = shoal::bench::SpreadOf(a), sb = shoal::bench::SpreadOf(b);
    double ma = 0, mb = 0;
    for (int s = 0; s < seeds; ++s) {
      ma += a[s] / seeds;
      mb += b[s] / seeds;
    }
    const double diff = std::fabs(ma - mb);
    const double spread = std::max(sa.max - sa.min, sb.max - sb.min);
    worst = std::max(worst, diff);
    if (!(diff <= spread) && seeds > 1) within = false;
    std::printf("  %10s %10s %10s %12s\n", Num(ma, 4).c_str(), Num(mb, 4).c_str(),
                Num(diff, 4).c_str(), Num(spread, 4).c_str());
  }
  std::printf("accuracy per round agrees within the seeds' spread: %s (largest |diff| %s)\n",
              seeds > 1 ? (within ? "yes" : "NO") : "one seed, no spread", Num(worst, 4).c_str());
  std::printf("RESULT fl_flower_train_gap ratio=%s\n", Num(worst, 4).c_str());
  return failures == 0 && within ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3, rounds = 3, workers = 16, resnet_clients = 16, train_rounds = 10, seeds = 3;
  int train_clients = 16, epochs = 1, shoal_rounds = 10;
  double lr = 0.05;
  bool quick = false, train = false;
  std::vector<std::string> clients = {"16", "128", "1024"};
  shoal::bench::Args args(
      "bench-fl-flower [--runs N] [--rounds R] [--clients 16,128,1024] [--resnet-clients N] "
      "[--workers W] [--quick] [--train] [--train-rounds R] [--seeds S] [--lr LR] [--epochs E] "
      "[--train-clients N] [--shoal-rounds R] [--flower-cap S]");
  args.Option("--runs", &runs)
      .Option("--rounds", &rounds)
      .Option("--clients", &clients)
      .Option("--resnet-clients", &resnet_clients)
      .Option("--workers", &workers)
      .Switch("--quick", &quick, true)
      .Switch("--train", &train, true)
      .Option("--train-rounds", &train_rounds)
      .Option("--seeds", &seeds)
      .Option("--lr", &lr)
      .Option("--epochs", &epochs)
      .Option("--train-clients", &train_clients)
      .Option("--shoal-rounds", &shoal_rounds)
      .Option("--flower-cap", &g_flower_cap);
  if (!args.Parse(argc, argv)) return 2;
  if (train) {
    return RunTraining(quick ? 2 : train_rounds, quick ? 1 : seeds, train_clients, lr, epochs);
  }
  if (quick) {
    runs = 1;
    rounds = 2;
    clients = {"16"};
    resnet_clients = 0;
    shoal_rounds = 5;
  }
  if (runs < 1 || rounds < 1 || workers < 1) return args.Usage() ? 2 : 2;
  std::vector<Row> rows;
  for (const std::string& c : clients)
    rows.push_back({"mlp 784-128-10", 128, std::atoi(c.c_str())});
  // 784-14704-10: 11,689,690 f32 parameters, ResNet-18's count (bench-round's model).
  if (resnet_clients > 0) rows.push_back({"resnet18-sized", 14704, resnet_clients});

  struct RowResult {
    Row row;
    std::vector<Figures> shoal, flower;
  };
  std::vector<RowResult> results;
  int failures = 0;
  for (const Row& row : rows) {
    RowResult rr{row, {}, {}};
    for (int run = 0; run < runs; ++run) {
      // Alternate which system goes first, so neither always meets the other's leftovers.
      for (int side = 0; side < 2; ++side) {
        const bool shoal_now = (side == 0) == (run % 2 == 0);
        std::fprintf(stderr, "bench-fl-flower: %s, %d clients, run %d: %s\n", row.model.c_str(),
                     row.clients, run + 1, shoal_now ? "Shoal" : "Flower");
        Figures f = shoal_now ? RunShoal(row, std::max(rounds, shoal_rounds), workers)
                              : RunFlower(row, rounds, workers);
        if (!f.ok) {
          ++failures;
          std::fprintf(stderr, "bench-fl-flower: %s failed: %s\n", shoal_now ? "Shoal" : "Flower",
                       f.error.c_str());
        }
        (shoal_now ? rr.shoal : rr.flower).push_back(f);
      }
    }
    results.push_back(std::move(rr));
  }

  std::printf(
      "bench-fl-flower: FedAvg server side, Shoal (shoald, FLJob fedavg) vs Flower 1.42 "
      "(flower-superlink --insecure, in-memory state, subprocess isolation: flower-superexec + "
      "flwr-serverapp running flwr.serverapp.strategy.FedAvg, fraction_train 1, "
      "fraction_evaluate 0; Flower's defaults otherwise (5 MB array chunks, the grid's 3 s reply "
      "poll, FLWR_LOG_LEVEL unset) but the nodes' heartbeat interval: 1800 s, Flower's maximum, "
      "so no beat costs CPU or drops a node under load)\n");
  std::printf(
      "clients: one load generator for both (bench/fl_flower_load.py, %d worker threads), each "
      "client speaking its server's own protocol with precomputed replies: Shoal's SDK (task, "
      "model, update) and Flower's Fleet API through flwr's SuperNode client (pull message + "
      "model objects, confirm, push reply + objects, signed requests); each client's update "
      "has its own values. %d run(s); Flower %d round(s), Shoal %d (CPU ticks are 10 ms); "
      "per-round figures over rounds 2..R (all when R < 3): CPU the mean, the others the "
      "median; ratio = Shoal / Flower per run, min / median / max\n",
      workers, runs, rounds, std::max(rounds, shoal_rounds));
  std::printf(
      "Flower rounds whose uploads ran past %s s were cut (--flower-cap): its figures are then "
      "lower bounds (>=): CPU and round time scaled from the uploads done to all clients (the "
      "ServerApp's pull and aggregate not included), peak RSS as far as it got, commit latency "
      "the largest measured at fewer clients; the ratios are then upper bounds (<=)\n",
      Num(g_flower_cap, 0).c_str());
  std::printf("%-16s %7s  %-20s %12s %13s  %-28s %s\n", "model", "clients", "figure", "Shoal",
              "Flower", "ratio min / med / max", "target");
  struct Target {
    double cpu = NAN, commit = NAN, rss = NAN, round = NAN;
  };
  Target at1024;
  bool have1024 = false;
  std::map<int, double> flower_commit;  // hidden -> the largest measured Flower commit so far
  for (const RowResult& rr : results) {
    bool partial = false;
    for (const Figures& f : rr.flower) partial = partial || f.partial;
    const double commit_bound =
        flower_commit.count(rr.row.hidden) ? flower_commit[rr.row.hidden] : NAN;
    const bool big = rr.row.clients == 1024 && rr.row.hidden == 128;
    auto line = [&](const char* name, auto get, double target, double* keep, int digits) {
      std::vector<double> s, fl, ratio;
      for (size_t i = 0; i < rr.shoal.size() && i < rr.flower.size(); ++i) {
        const double a = rr.shoal[i].ok ? get(rr.shoal[i]) : NAN;
        double b = rr.flower[i].ok ? get(rr.flower[i]) : NAN;
        s.push_back(a);
        fl.push_back(b);
        ratio.push_back(a / b);
      }
      const auto ss = shoal::bench::SpreadOf(s), fs = shoal::bench::SpreadOf(fl),
                 rs = shoal::bench::SpreadOf(ratio);
      std::string verdict;
      if (big && !std::isnan(target)) {
        verdict = "<= " + Num(target, 1) + (rs.median <= target ? " met" : " MISSED");
      }
      std::printf("%-16s %7d  %-20s %12s %13s  %-28s %s\n", rr.row.model.c_str(), rr.row.clients,
                  name, Num(ss.median, digits).c_str(),
                  ((partial ? ">= " : "") + Num(fs.median, digits)).c_str(),
                  ((partial ? "<= " : "") + SpreadText(rs)).c_str(), verdict.c_str());
      if (big && keep != nullptr) *keep = rs.median;
    };
    line(
        "server CPU s/round", [](const Figures& f) { return f.cpu_s; }, 0.2, &at1024.cpu, 3);
    line(
        "commit latency s", [&](const Figures& f) { return f.partial ? commit_bound : f.commit_s; },
        0.2, &at1024.commit, 4);
    line(
        "peak server RSS MB", [](const Figures& f) { return f.rss_mb; }, 0.5, &at1024.rss, 1);
    line(
        "round time s", [](const Figures& f) { return f.round_s; }, NAN, &at1024.round, 3);
    std::vector<double> pulled, agg, uploads, window;
    int replies = -1;
    for (const Figures& f : rr.flower) {
      pulled.push_back(f.pulled_s);
      agg.push_back(f.aggregate_s);
      if (f.partial) {
        uploads.push_back(f.uploads);
        window.push_back(f.window_s);
      } else if (f.ok) {
        flower_commit[rr.row.hidden] =
            std::max(std::isnan(commit_bound) ? 0.0 : commit_bound, f.commit_s);
        replies = f.replies;
      }
    }
    if (partial) {
      std::printf("%-16s %7d  Flower: round 1 cut after %s uploads of %d in %s s\n",
                  rr.row.model.c_str(), rr.row.clients,
                  Num(shoal::bench::Median(uploads), 0).c_str(), rr.row.clients,
                  Num(shoal::bench::Median(window), 1).c_str());
    } else {
      std::printf(
          "%-16s %7d  Flower's commit: last upload -> ServerApp holds all replies %s s (its grid "
          "polls every 3 s), FedAvg's aggregate %s s; replies aggregated %d\n",
          rr.row.model.c_str(), rr.row.clients, Num(shoal::bench::Median(pulled), 3).c_str(),
          Num(shoal::bench::Median(agg), 4).c_str(), replies);
    }
    if (big) have1024 = true;
  }
  for (const RowResult& rr : results) {
    if (!rr.shoal.empty() && rr.shoal[0].ok && !rr.flower.empty() && rr.flower[0].ok) {
      std::printf("processes counted: Shoal: %s; Flower: %s\n", rr.shoal[0].processes.c_str(),
                  rr.flower[0].processes.c_str());
      break;
    }
  }
  if (failures != 0) std::printf("failed runs: %d (see stderr)\n", failures);
  if (have1024) {
    std::printf("RESULT fl_flower ratio=%s\n", Num(at1024.cpu).c_str());
    std::printf("RESULT fl_flower_commit ratio=%s\n", Num(at1024.commit).c_str());
    std::printf("RESULT fl_flower_rss ratio=%s\n", Num(at1024.rss).c_str());
    std::printf("RESULT fl_flower_round ratio=%s\n", Num(at1024.round).c_str());
  } else {
    // No 1024-client row (--quick, --clients): the largest MLP row's CPU ratio, named as such.
    const RowResult& last = *std::max_element(results.begin(), results.end(),
                                              [](const RowResult& a, const RowResult& b) {
                                                return (a.row.hidden == 128 ? a.row.clients : 0) <
                                                       (b.row.hidden == 128 ? b.row.clients : 0);
                                              });
    std::vector<double> r;
    for (size_t i = 0; i < last.shoal.size() && i < last.flower.size(); ++i) {
      r.push_back(last.shoal[i].cpu_s / last.flower[i].cpu_s);
    }
    std::printf("RESULT fl_flower_%d ratio=%s\n", last.row.clients,
                Num(shoal::bench::SpreadOf(r).median).c_str());
  }
  return failures == 0 ? 0 : 1;
}
