// bench-commit-stall: does an FL commit stall the gateway loop? `POST /fn/echo` at a fixed rate
// (open loop, bench/open_loop.h: latency from each request's due time, no coordinated omission)
// on one shoald, first with no FL job (the anchor), then while a ResNet-18-sized FedAvg job
// (an 784-14704-10 MLP: 11,689,690 float32 parameters, 46.8 MB per update) commits back to back:
// `--clients` clients push updates in a loop (each polls the job's version and sends its update
// for it as soon as the last round committed), so a round closes, merges, steps, caches the
// model's bytes and checkpoints while the next round's updates arrive on the same loop(s). Each
// run has both phases (same shoald, same rate, same connections); the figure per run is echo's
// p99 during commits over its p99 without a job (and the same for p50 and max). Targets: p99 <=
// 1.5 x, max <= 3 x.
//
//   bench-commit-stall [--runs R (3)] [--seconds S (6)] [--rate Q (200)] [--connections C (8)]
//                      [--clients K (2)] [--loops L (1)] [--shoald PATH]
// --loops 1 (the default) puts the echo connections on the loop that receives the updates and
// calls the coordinator; --shoald runs another shoald (an earlier build's) for a before/after.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "open_loop.h"
#include "run_stats.h"
#include "shoal/fl/wire/architectures.h"
#include "tests/support/shoald_fixture.h"
#include "update_sender.h"
#include "update_template.h"

using namespace shoal;
using namespace shoal::testing;
using Json = nlohmann::json;

namespace {

constexpr uint64_t kHidden = 14704;  // 784-14704-10 MLP: 11,689,690 parameters (ResNet-18's 11.7 M)

struct Phase {
  shoal::bench::OpenLoopResult echo;
  uint64_t commits = 0;  // versions committed while echo ran
};

// The job's version from GET /v1/jobs/<job> on `fd` (kept alive); -1 on an error.
int64_t Version(int fd, const std::string& job, const std::string& auth) {
  const std::string head =
      "GET /v1/jobs/" + job + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "\r\n\r\n";
  if (::write(fd, head.data(), head.size()) != static_cast<ssize_t>(head.size())) return -1;
  std::string body;
  if (shoal::bench::ReadResponse(fd, &body) != 200) return -1;
  Json st = Json::parse(body, nullptr, false);
  return st.is_object() ? st.value("version", int64_t{-1}) : -1;
}

// One run's loaded phase: deploys `job`, joins `clients` clients that push updates in a loop,
// and measures echo once the commits are going; the job is deleted after.
Phase Loaded(Shoald& shoald, const std::string& job, int clients,
             const shoal::bench::UpdateTemplate& tmpl, const std::string& echo, double rate,
             double seconds, int connections, bool* ok) {
  Phase ph;
  *ok = false;
  auto d = shoald.Deploy("apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
                         "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, "
                         "hidden: " +
                         std::to_string(kHidden) + "}\n  clients: {expected: " +
                         std::to_string(clients) + "}\n  stop: {rounds: 100000}\n");
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy %s: %s\n", job.c_str(), d.err.c_str());
    return ph;
  }
  shoald.WaitReady("fl." + job, 1, 30000);
  std::vector<std::pair<std::string, std::string>> ids;
  for (int k = 0; k < clients; ++k) {
    auto r =
        shoald.Api("POST", "/v1/jobs/" + job + "/join", "{}", {"Content-Type: application/json"});
    Json j = Json::parse(r.body, nullptr, false);
    ids.emplace_back(j.value("client_id", ""), j.value("token", ""));
  }
  const std::string auth = shoald.AuthHeader();
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::vector<std::thread> pushers;
  const double deadline = shoal::bench::Now() + seconds + 120;  // bounded whatever happens
  for (int k = 0; k < clients; ++k) {
    pushers.emplace_back([&, k] {
      int fd = shoal::bench::ConnectLoopback(shoald.port());
      int64_t sent_for = -1;
      while (!stop && shoal::bench::Now() < deadline) {
        const int64_t v = Version(fd, job, auth);
        if (v < 0) {
          close(fd);
          fd = shoal::bench::ConnectLoopback(shoald.port());
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        if (v == sent_for) {  // its update for this round is in: wait for the commit
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continue;
        }
        const std::vector<std::string> prefix =
            shoal::bench::RoundPrefixes(tmpl.header, job, {ids[k]}, static_cast<int>(v));
        const auto p = shoal::bench::PostUpdate(fd, job, prefix[0], tmpl.area, auth);
        if (p.status == 202) {
          sent_for = v;
        } else {
          // Stale (the round committed meanwhile) or a closed connection: again. Said once.
          if (refused++ == 0) {
            std::fprintf(stderr, "  %s: an update for version %lld: HTTP %d %s\n", job.c_str(),
                         static_cast<long long>(v), p.status, p.body.substr(0, 200).c_str());
          }
          close(fd);
          fd = shoal::bench::ConnectLoopback(shoald.port());
        }
      }
      close(fd);
    });
  }
  // The commits are going: version 2 committed (the leaf started, the pool's pages touched).
  const int vfd = shoal::bench::ConnectLoopback(shoald.port());
  while (Version(vfd, job, auth) < 2 && shoal::bench::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int64_t v0 = Version(vfd, job, auth);
  ph.echo = shoal::bench::RunOpenLoop(shoald.port(), echo, rate, seconds, connections);
  const int64_t v1 = Version(vfd, job, auth);
  close(vfd);
  stop = true;
  for (auto& t : pushers) t.join();
  ph.commits = v0 >= 0 && v1 >= v0 ? static_cast<uint64_t>(v1 - v0) : 0;
  auto del = shoald.Api("DELETE", "/v1/jobs/" + job);
  if (del.status / 100 != 2) {
    std::fprintf(stderr, "delete %s: HTTP %d %s\n", job.c_str(), del.status, del.body.c_str());
  }
  std::fprintf(stderr, "  %s: versions %lld -> %lld during echo, %d update(s) refused/resent\n",
               job.c_str(), static_cast<long long>(v0), static_cast<long long>(v1), refused.load());
  *ok = v0 >= 2 && ph.commits > 0;
  return ph;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  int runs = 3, connections = 8, clients = 2, loops = 1;
  double seconds = 6, rate = 200;
  std::string binary;
  shoal::bench::Args args(
      "bench-commit-stall [--runs R] [--seconds S] [--rate Q] [--connections C] [--clients K] "
      "[--loops L] [--shoald PATH]");
  args.Option("--runs", &runs)
      .Option("--seconds", &seconds)
      .Option("--rate", &rate)
      .Option("--connections", &connections)
      .Option("--clients", &clients)
      .Option("--loops", &loops)
      .Option("--shoald", &binary);
  if (!args.Parse(argc, argv)) return 2;
  if (runs < 1 || clients < 1 || loops < 1 || seconds <= 0 || rate <= 0) {
    args.Usage();
    return 2;
  }

  model::ArchitectureOptions arch;
  arch.hidden = {kHidden};
  auto mspec = model::ArchitectureSpec("mlp", arch);
  if (!mspec.ok()) return 1;
  const shoal::bench::UpdateTemplate tmpl =
      shoal::bench::MakeUpdateTemplate(model::InitModel(*mspec, 1));

  Shoald shoald;
  Shoald::Options opt;
  opt.binary = binary;
  opt.threads = static_cast<uint32_t>(loops);
  // Every client's update of two rounds (held until the checkpoint behind its commit is
  // written), the partial sums (warm and in use), the model, room.
  opt.pool_bytes = (tmpl.area.size() + 4096) * static_cast<uint64_t>(4 * clients + 8);
  opt.max_body_bytes = uint64_t{128} << 20;
  if (!shoal::bench::StartShoald(shoald, opt) || !shoal::bench::DeployEcho(shoald)) return 1;
  const std::string echo =
      "POST /fn/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello";
  // Warm-up: the echo instance's first requests.
  shoal::bench::RunOpenLoop(shoald.port(), echo, rate, 1, connections);

  std::fprintf(stderr,
               "bench-commit-stall: echo at %.0f req/s (open loop, %d connections, %.0f s per "
               "phase), %d loop(s), FedAvg on %zu parameters, %d clients, %d run(s)\n",
               rate, connections, seconds, loops, mspec->num_params(), clients, runs);
  std::vector<double> r50, r99, rmax;
  std::vector<double> b50, b99, bmax, l50, l99, lmax;
  bool all_ok = true;
  for (int r = 0; r < runs; ++r) {
    const auto base = shoal::bench::RunOpenLoop(shoald.port(), echo, rate, seconds, connections);
    bool ok = false;
    const Phase loaded = Loaded(shoald, "stall" + std::to_string(r), clients, tmpl, echo, rate,
                                seconds, connections, &ok);
    all_ok = all_ok && ok && base.unanswered == 0 && loaded.echo.unanswered == 0;
    std::fprintf(stderr,
                 "  run %d: no job    p50 %.3f ms, p99 %.3f ms, max %.2f ms (%ld due, %ld 2xx)\n"
                 "         commits   p50 %.3f ms, p99 %.3f ms, max %.2f ms (%ld due, %ld 2xx), "
                 "%llu commit(s)\n",
                 r + 1, base.p50_ms, base.p99_ms, base.max_ms, base.due, base.ok,
                 loaded.echo.p50_ms, loaded.echo.p99_ms, loaded.echo.max_ms, loaded.echo.due,
                 loaded.echo.ok, static_cast<unsigned long long>(loaded.commits));
    b50.push_back(base.p50_ms);
    b99.push_back(base.p99_ms);
    bmax.push_back(base.max_ms);
    l50.push_back(loaded.echo.p50_ms);
    l99.push_back(loaded.echo.p99_ms);
    lmax.push_back(loaded.echo.max_ms);
    r50.push_back(loaded.echo.p50_ms / base.p50_ms);
    r99.push_back(loaded.echo.p99_ms / base.p99_ms);
    rmax.push_back(loaded.echo.max_ms / base.max_ms);
  }
  shoald.Stop();
  using shoal::bench::SpreadOf;
  auto row = [](const char* name, const std::vector<double>& b, const std::vector<double>& l,
                const std::vector<double>& ratio, const char* target) {
    const auto sb = SpreadOf(b), sl = SpreadOf(l), sr = SpreadOf(ratio);
    std::printf("%-5s %10.3f %12.3f   %6.2f %6.2f %6.2f   %s\n", name, sb.median, sl.median, sr.min,
                sr.median, sr.max, target);
  };
  std::printf("echo latency, ms (median over %d runs)   ratio commits / no job\n", runs);
  std::printf("%-5s %10s %12s   %6s %6s %6s   %s\n", "", "no job", "commits", "min", "median",
              "max", "target");
  row("p50", b50, l50, r50, "");
  row("p99", b99, l99, r99, "<= 1.5");
  row("max", bmax, lmax, rmax, "<= 3");
  if (!all_ok) std::printf("(some run had no commits during echo, or unanswered requests)\n");
  std::printf("RESULT commit_stall_max ratio=%.3f\n", SpreadOf(rmax).median);
  std::printf("RESULT commit_stall ratio=%.3f\n", SpreadOf(r99).median);
  return all_ok ? 0 : 1;
}
