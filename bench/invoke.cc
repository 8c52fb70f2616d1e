// bench-invoke: HTTP throughput and latency of a warm function (/fn/echo, 64-byte body)
// against nginx answering `return 200` with the same worker count, both loaded by the same
// wrk command in the same run. Both keep every connection open for the whole run (nginx's
// keepalive_requests, 1000 by default, is set to 1000000; Shoal never closes one). Throughput is
// effective: responses with a 2xx status per second, so wrk's non-2xx responses and its socket
// read/write/timeout errors count against the server (more than 1% of requests fails the run).
// The servers run --runs times each, interleaved (A B B A ...), and the table shows each one's
// median; the ratio's min/median/max pair the runs. Higher req/s is better; lower p99 is better.
//
//   bench-invoke [--seconds S (10)] [--connections C (64)] [--runs R (3)]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "run_stats.h"
#include "tests/support/shoald_fixture.h"
#include "wrk_runner.h"

using namespace shoal::testing;
using shoal::bench::RunWrk;
using shoal::bench::WrkResult;

using shoal::bench::Median;

int main(int argc, char** argv) {
  int secs = 10, conns = 64, runs = 3;
  shoal::bench::Args args("bench-invoke [--seconds S] [--connections C] [--runs R]");
  args.Option("--seconds", &secs).Option("--connections", &conns).Option("--runs", &runs);
  if (!args.Parse(argc, argv)) return 2;
  if (secs < 1 || conns < 1 || runs < 1) {
    std::fprintf(stderr, "bench-invoke: --seconds, --connections and --runs must be >= 1\n");
    return 2;
  }
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int wrk_threads = std::max(1, workers);
  if (!shoal::bench::WrkInstalled("bench-invoke", "invoke", /*nginx=*/true)) return 1;
  char tmpl[] = "/tmp/shoal-bench-invoke-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string body(64, 'x');
  const std::string script = dir + "/post.lua";
  std::ofstream(script) << "wrk.method = \"POST\"\nwrk.body = \"" << body
                        << "\"\nwrk.headers[\"Content-Type\"] = \"text/plain\"\n";

  std::fprintf(stderr, "[1/4] starting shoald (%d event loops) and deploying echo\n", workers);
  Shoald shoald;
  if (!shoal::bench::StartShoald(shoald, workers)) return 1;
  if (!shoal::bench::DeployEcho(shoald)) return 1;
  const std::string mode =
      shoald.Metric("shoal_dataplane_mode", "mode=\"sockmap\"") == 1 ? "sockmap" : "unix";

  std::fprintf(stderr, "[2/4] starting nginx (%d workers, return 200)\n", workers);
  const uint16_t nginx_port = static_cast<uint16_t>(shoald.port() + 1);
  const std::string conf = dir + "/nginx.conf";
  std::ofstream(conf) << "worker_processes " << workers << ";\npid " << dir
                      << "/nginx.pid;\nerror_log " << dir << "/error.log;\ndaemon off;\n"
                      << "events { worker_connections 4096; }\nhttp {\n access_log off;\n"
                      << " keepalive_requests 1000000;\n keepalive_timeout 300s;\n"
                      << " server {\n  listen 127.0.0.1:" << nginx_port << " reuseport;\n"
                      << "  location / { return 200 '" << body << "'; }\n }\n}\n";
  pid_t nginx = fork();
  if (nginx == 0) {
    execlp("nginx", "nginx", "-c", conf.c_str(), "-p", dir.c_str(), nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (Http(nginx_port, "GET", "/").status != 200) {
    std::fprintf(stderr, "nginx did not answer on %u\n", nginx_port);
    kill(nginx, SIGTERM);
    return 1;
  }

  std::fprintf(stderr, "[3/4] warm-up: wrk -t%d -c%d -d1s against each\n", wrk_threads, conns);
  RunWrk(shoald.port(), "/fn/echo", wrk_threads, conns, 1, script);
  RunWrk(nginx_port, "/", wrk_threads, conns, 1, script);
  std::vector<WrkResult> shoal_runs, nginx_runs;
  for (int r = 0; r < runs; ++r) {
    // A B B A ...: drift on a shared machine falls on both servers alike.
    for (int k = 0; k < 2; ++k) {
      const bool shoal_turn = (k == 0) == (r % 2 == 0);
      std::fprintf(stderr, "[4/4] run %d/%d: wrk -t%d -c%d -d%ds against %s\n", r + 1, runs,
                   wrk_threads, conns, secs, shoal_turn ? "shoal /fn/echo" : "nginx");
      if (shoal_turn) {
        shoal_runs.push_back(RunWrk(shoald.port(), "/fn/echo", wrk_threads, conns, secs, script));
      } else {
        nginx_runs.push_back(RunWrk(nginx_port, "/", wrk_threads, conns, secs, script));
      }
    }
  }
  kill(nginx, SIGTERM);
  waitpid(nginx, nullptr, 0);
  const auto served = shoald.Metric("shoal_requests_total", "code=\"200\",function=\"echo\"");
  shoald.Stop();

  auto med = [](const std::vector<WrkResult>& v, double WrkResult::*f) {
    std::vector<double> x;
    for (const auto& r : v) x.push_back(r.*f);
    return Median(x);
  };
  std::vector<double> pair_ratios;
  for (int r = 0; r < runs; ++r) {
    pair_ratios.push_back(
        nginx_runs[r].good_rps > 0 ? shoal_runs[r].good_rps / nginx_runs[r].good_rps : 0);
  }
  std::sort(pair_ratios.begin(), pair_ratios.end());
  const double s_rps = med(shoal_runs, &WrkResult::good_rps),
               n_rps = med(nginx_runs, &WrkResult::good_rps);
  const double s_p99 = med(shoal_runs, &WrkResult::p99_ms),
               n_p99 = med(nginx_runs, &WrkResult::p99_ms);
  const double ratio = n_rps > 0 ? s_rps / n_rps : 0;
  const double p99_ratio = n_p99 > 0 ? s_p99 / n_p99 : 0;
  std::printf(
      "bench-invoke: POST 64 B, wrk -t%d -c%d -d%ds, %d server workers, data plane %s, "
      "%d interleaved runs each (median); nginx keepalive_requests 1000000\n",
      wrk_threads, conns, secs, workers, mode.c_str(), runs);
  std::printf("%-22s %4s %12s %12s %10s %10s %8s %8s\n", "server", "run", "2xx req/s", "wrk req/s",
              "p50 ms", "p99 ms", "non-2xx", "sock err");
  long errors = 0, requests = 0;
  auto row = [&](const char* name, const std::vector<WrkResult>& v) {
    for (size_t r = 0; r < v.size(); ++r) {
      std::printf("%-22s %4zu %12.0f %12.0f %10.3f %10.3f %8ld %8ld\n", name, r + 1, v[r].good_rps,
                  v[r].rps, v[r].p50_ms, v[r].p99_ms, v[r].non2xx, v[r].socket_errors);
      errors += v[r].errors;
      requests += v[r].requests;
    }
    std::printf("%-22s %4s %12.0f %12.0f %10.3f %10.3f\n", name, "med",
                med(v, &WrkResult::good_rps), med(v, &WrkResult::rps), med(v, &WrkResult::p50_ms),
                med(v, &WrkResult::p99_ms));
  };
  row("shoal /fn/echo", shoal_runs);
  row("nginx return 200", nginx_runs);
  std::printf(
      "ratio 2xx req/s shoal/nginx = %.3f (median of each; per run pair min/median/max "
      "%.3f/%.3f/%.3f; higher is better, target >= 0.7)\n",
      ratio, pair_ratios.front(), Median(pair_ratios), pair_ratios.back());
  std::printf("ratio p99 shoal/nginx   = %.3f (lower is better, target <= 2)\n", p99_ratio);
  std::printf("shoal counted %.0f echo responses with status 200\n", served);
  bool failed = false;
  for (const auto* v : {&shoal_runs, &nginx_runs}) {
    for (const auto& r : *v) {
      if (r.requests == 0 || r.errors > r.requests / 100) failed = true;
    }
  }
  if (failed) {
    std::printf(
        "FAILED: a run had no responses or more than 1%% errors (%ld errors in %ld "
        "responses); wrk's output:\n%s%s",
        errors, requests, shoal_runs.back().raw.c_str(), nginx_runs.back().raw.c_str());
  }
  std::printf("RESULT invoke ratio=%.3f\n", ratio);
  return failed ? 1 : 0;
}
