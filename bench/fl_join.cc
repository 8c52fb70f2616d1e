// bench-fl-join: what a join and the job's status cost as the clients of one FL job grow
// (issue 28). A real shoald; one FedAvg job; clients join over HTTP as shoal-client joins (the
// SDK's FlHttpClient, on the public gateway, with an fl-client token of the job), one at a time
// on one kept-alive connection, up to each of --clients (64, 512, 2048, 8192). Each join is
// timed; at each N the job's status (GET /v1/jobs/{job}, the SDK's JobStatus) is fetched
// --status-gets times and timed, its size noted. shoald's own writes per join (wchar of
// /proc/<pid>/io: files and sockets) and the job directory's size show what the persistence of
// a join costs.
//
// Figures per N: join p50/p99 over the last --window joins before N ("at N"), status p50 and
// bytes, bytes shoald wrote per join over the band. The anchor is the join at 64 in the same
// run. RESULT fl_join ratio: join p50 at 2048 over join p50 at 64 (median over --runs); 1.0 is
// flat (the target: ~1.0). Bounded: every run stops joining after --max-seconds.
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "run_stats.h"
#include "shoal/fl/client/fl_http_client.h"
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;
using Json = nlohmann::json;
using shoal::bench::Percentile;
using shoal::bench::SpreadOf;

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Options {
  std::vector<std::string> clients = {"64", "512", "2048", "8192"};
  int runs = 3;
  int window = 64;       // the joins "at N": the last `window` before N
  int status_gets = 20;  // status fetches at each N
  double max_seconds = 240;
  std::string algorithm = "fedavg";
  std::string shoald;  // another shoald binary (a build before a change): the same conditions
};

struct Point {
  size_t n = 0;
  double join_p50 = NAN, join_p99 = NAN, status_p50 = NAN, status_p99 = NAN;
  double status_bytes = 0, written_per_join = 0, dir_bytes = 0;
};

// wchar of /proc/<pid>/io: bytes the process passed to write()/send() (files and sockets).
uint64_t Wchar(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  uint64_t v = 0;
  while (f >> key >> v) {
    if (key == "wchar:") return v;
  }
  return 0;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  }
  return n;
}

std::string Manifest(const std::string& name, const Options& o, size_t clients) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm: {name: " + o.algorithm +
         "}\n  model: {architecture: mlp, hidden: 16}\n  clients: {expected: " +
         std::to_string(clients) +
         "}\n  stop: {rounds: 10}\n"
         "  training: {localSteps: 10, learningRate: 0.1, batchSize: 32}\n"
         "  aggregation: {maxFanIn: 8, maxLeaves: 2}\n";
}

bool RunOnce(const Options& o, const std::vector<size_t>& bands, std::vector<Point>* out) {
  Shoald shoald;
  Shoald::Options options;
  options.binary = o.shoald;
  if (!shoal::bench::StartShoald(shoald, options)) return false;
  const std::string job = "joins";
  auto d = shoald.Deploy(Manifest(job, o, bands.back()));
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy: %s %s\n", d.out.c_str(), d.err.c_str());
    return false;
  }
  const std::string token = shoald.CreateToken("fl-client", "", job);
  shoal::client::FlHttpClient http("http://127.0.0.1:" + std::to_string(shoald.port()), job, token);
  const std::string dir = shoald.state_dir() + "/state/jobs/" + job;
  std::vector<double> joins;  // ms, in join order
  const auto t_run = Clock::now();
  size_t joined = 0;
  uint64_t wchar_before = Wchar(shoald.pid());
  for (size_t n : bands) {
    const size_t band_first = joined;
    while (joined < n) {
      if (std::chrono::duration<double>(Clock::now() - t_run).count() > o.max_seconds) {
        std::fprintf(stderr, "run stopped at %zu clients: --max-seconds %.0f\n", joined,
                     o.max_seconds);
        shoald.Stop();
        return true;
      }
      const auto t0 = Clock::now();
      auto j = http.Join("client-" + std::to_string(joined), "");
      const double ms = Ms(t0);
      if (!j.ok()) {
        std::fprintf(stderr, "join %zu: %s\n", joined, j.status().ToString().c_str());
        shoald.Stop();
        return false;
      }
      joins.push_back(ms);
      ++joined;
    }
    const uint64_t wchar = Wchar(shoald.pid());
    Point p;
    p.n = n;
    const size_t w = std::min<size_t>(static_cast<size_t>(o.window), n / 2);
    std::vector<double> at(joins.end() - static_cast<std::ptrdiff_t>(w), joins.end());
    p.join_p50 = Percentile(at, 0.5);
    p.join_p99 = Percentile(at, 0.99);
    p.written_per_join =
        static_cast<double>(wchar - wchar_before) / static_cast<double>(joined - band_first);
    // The status: as the SDK fetches it.
    std::vector<double> st;
    for (int i = 0; i < o.status_gets; ++i) {
      const auto t0 = Clock::now();
      auto s = http.JobStatus();
      st.push_back(Ms(t0));
      if (!s.ok()) {
        std::fprintf(stderr, "status at %zu: %s\n", n, s.status().ToString().c_str());
        shoald.Stop();
        return false;
      }
      const Json j = Json::parse(s->json, nullptr, false);
      if (!j.is_object() || j["clients"].value("joined", size_t{0}) != n) {
        std::fprintf(stderr, "status at %zu says joined %s\n", n,
                     j.is_object() ? j["clients"].value("joined", Json()).dump().c_str() : "?");
        shoald.Stop();
        return false;
      }
      p.status_bytes = static_cast<double>(s->json.size());
    }
    p.status_p50 = Percentile(st, 0.5);
    p.status_p99 = Percentile(st, 0.99);
    p.dir_bytes = static_cast<double>(DirBytes(dir));
    wchar_before = Wchar(shoald.pid());
    out->push_back(p);
  }
  shoald.Stop();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  shoal::bench::Args args(
      "usage: bench-fl-join [--clients 64,512,2048,8192] [--runs R] [--window W] "
      "[--status-gets G] [--max-seconds T] [--algorithm fedavg] [--shoald PATH]");
  args.Option("--clients", &o.clients)
      .Option("--runs", &o.runs)
      .Option("--window", &o.window)
      .Option("--status-gets", &o.status_gets)
      .Option("--max-seconds", &o.max_seconds)
      .Option("--algorithm", &o.algorithm)
      .Option("--shoald", &o.shoald);
  if (!args.Parse(argc, argv)) return 2;
  std::vector<size_t> bands;
  for (const std::string& c : o.clients) {
    const size_t n = std::strtoull(c.c_str(), nullptr, 10);
    if (n < 2 || n > 100000 || (!bands.empty() && n <= bands.back())) return args.Usage() ? 2 : 2;
    bands.push_back(n);
  }
  if (o.runs < 1 || o.window < 1 || o.status_gets < 1) return args.Usage() ? 2 : 2;

  std::vector<std::vector<Point>> runs;
  for (int r = 0; r < o.runs; ++r) {
    std::vector<Point> pts;
    if (!RunOnce(o, bands, &pts)) return 1;
    runs.push_back(std::move(pts));
  }

  std::printf(
      "bench-fl-join: %s job, clients joining one at a time over HTTP (FlHttpClient, "
      "public gateway), %d run(s); join: the last %d joins before N; shared 2-core VM: "
      "noisy\n",
      o.algorithm.c_str(), o.runs, o.window);
  std::printf("%8s %22s %22s %22s %12s %14s %12s\n", "clients", "join p50 ms", "join p99 ms",
              "status p50 ms", "status KB", "written B/join", "job dir KB");
  auto cell = [](const std::vector<double>& v) {
    const auto s = SpreadOf(v);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f [%.3f-%.3f]", s.median, s.min, s.max);
    return std::string(buf);
  };
  std::vector<double> anchor, at2048;
  for (size_t b = 0; b < bands.size(); ++b) {
    std::vector<double> p50, p99, sp50, sbytes, wpj, dirb;
    for (const auto& pts : runs) {
      if (b >= pts.size()) continue;
      p50.push_back(pts[b].join_p50);
      p99.push_back(pts[b].join_p99);
      sp50.push_back(pts[b].status_p50);
      sbytes.push_back(pts[b].status_bytes / 1024);
      wpj.push_back(pts[b].written_per_join);
      dirb.push_back(pts[b].dir_bytes / 1024);
    }
    if (p50.empty()) {
      std::printf("%8zu %22s (not reached within --max-seconds)\n", bands[b], "-");
      continue;
    }
    std::printf("%8zu %22s %22s %22s %12.1f %14.0f %12.1f\n", bands[b], cell(p50).c_str(),
                cell(p99).c_str(), cell(sp50).c_str(), SpreadOf(sbytes).median,
                SpreadOf(wpj).median, SpreadOf(dirb).median);
  }
  // The ratio per run: join p50 at 2048 (or the largest N below it reached) over at the first N.
  std::vector<double> ratios;
  size_t target = bands.size() - 1;
  for (size_t b = 0; b < bands.size(); ++b) {
    if (bands[b] == 2048) target = b;
  }
  for (const auto& pts : runs) {
    if (pts.size() > target && pts[0].join_p50 > 0) {
      ratios.push_back(pts[target].join_p50 / pts[0].join_p50);
    }
  }
  const auto s = SpreadOf(ratios);
  std::printf(
      "join p50 at %zu / at %zu (anchor, same run): min %.3f median %.3f max %.3f "
      "(target ~1.0: flat)\n",
      bands[target], bands[0], s.min, s.median, s.max);
  std::printf("RESULT fl_join ratio=%.3f\n", s.median);
  return ratios.empty() ? 1 : 0;
}
