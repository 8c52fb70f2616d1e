// bench-soak: shoald held at saturation for a long time (issue 18). wrk keeps /fn/echo
// saturated while an FL job's clients (shoal-client, digits, 4 clients) push updates at the same
// time, with the compromise detector's behaviour probes loaded and scoring every instance.
// Every `--sample` seconds it samples the RSS and open fds of every process of shoald's tree
// (shoald, zygotes, instances, FL leaves) and of the client, the tenant pools' free bytes, and
// the entries of the probes' BPF maps. After the load it checks, and the table shows:
//   RSS flat within +-5 % after the warm-up (per process: first sample after warm-up, min,
//   max, last; drift = the largest distance from the first, over the first);
//   zero errors (wrk's non-2xx and socket errors; the client's exit status);
//   the pools' free bytes back to their value before the load (the FL job deleted after it,
//   so that the updates and models it holds go back too); no fd growth in shoald; the BPF
//   maps' entries back to their value before the load; zero anomalies.
// --no-fl and --no-detect leave the FL job or the detector out, to see which part of a growth
// is whose.
// Run by hand, not in CI (10 minutes by default):
//   bench-soak [--seconds S (600)] [--short (60 s)] [--sample S (5)] [--connections C (32)]
//              [--no-fl] [--no-detect]
// RESULT soak ratio = shoald's RSS at the end of the load over its RSS after the warm-up.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_shoald.h"
#include "proc_tree.h"
#include "tests/support/shoald_fixture.h"
#include "wrk_runner.h"

using namespace shoal::testing;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `root` and every descendant.
std::vector<int> Tree(int root) {
  return shoal::bench::Descendants(shoal::bench::ReadProcs(), root);
}

long RssKb(int pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

int Fds(int pid) {
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n - 2;
}

std::string Comm(int pid) {
  std::string c = ReadFile("/proc/" + std::to_string(pid) + "/comm");
  while (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

struct Sample {
  double t = 0;
  std::map<int, long> rss;
  std::map<int, int> fds;
  double pool_free = 0;
  double pool_live = 0;  // buffers allocated in the pools
  double map_instances = 0, map_seen = 0, watched = 0;
  double anomalies = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int secs = 600, sample_s = 5, conns = 32;
  bool with_fl = true, with_detect = true;
  shoal::bench::Args args(
      "bench-soak [--short | --seconds S] [--sample S] [--connections C] [--no-fl] [--no-detect]");
  args.Option("--seconds", &secs)
      .Switch("--short", &secs, 60)
      .Option("--sample", &sample_s)
      .Option("--connections", &conns)
      .Switch("--no-fl", &with_fl, false)
      .Switch("--no-detect", &with_detect, false);
  if (!args.Parse(argc, argv)) return 2;
  if (secs < 20 || sample_s < 1 || conns < 1) {
    std::fprintf(stderr, "bench-soak: --seconds >= 20, --sample and --connections >= 1\n");
    return 2;
  }
  if (!shoal::bench::WrkInstalled("bench-soak", "soak")) return 1;
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int warm_s = std::max(10, secs / 10);
  char tmpl[] = "/tmp/shoal-bench-soak-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string script = dir + "/post.lua";
  std::ofstream(script) << "wrk.method = \"POST\"\nwrk.body = \"" << std::string(64, 'x')
                        << "\"\nwrk.headers[\"Content-Type\"] = \"text/plain\"\n";

  std::fprintf(
      stderr,
      "[1/4] shoald (%d loops, detector every 2 s after 5 learning intervals), echo, FL job\n",
      workers);
  Shoald shoald;
  Shoald::Options opts;
  opts.threads = static_cast<uint32_t>(workers);
  opts.extra_yaml = "detect_interval_ms: 2000\ndetect_learn_intervals: 5\n" +
                    std::string(with_detect ? "" : "detect: false\n");
  if (!shoal::bench::StartShoald(shoald, opts)) return 1;
  const bool detector_on = shoald.Metric("shoal_detector_enabled") == 1;
  if (!shoal::bench::DeployEcho(shoald)) return 1;

  auto pools = [&](double* free, double* live) {
    auto j = json::parse(shoald.Api("GET", "/v1/node").body, nullptr, false);
    *free = *live = 0;
    if (!j.is_discarded()) {
      for (const auto& p : j.value("pools", json::array())) {
        *free += p.value("free_bytes", 0.0);
        *live += p.value("live_buffers", 0.0);
      }
    }
  };
  std::atomic<int> client_pid{0};
  auto take = [&](double t) {
    Sample s;
    s.t = t;
    std::vector<int> pids = Tree(shoald.pid());
    if (client_pid > 0) {
      for (int p : Tree(client_pid)) pids.push_back(p);
    }
    for (int p : pids) {
      const long rss = RssKb(p);
      if (rss < 0) continue;
      s.rss[p] = rss;
      s.fds[p] = Fds(p);
    }
    pools(&s.pool_free, &s.pool_live);
    s.map_instances = shoald.Metric("shoal_detector_bpf_entries", "map=\"instances\"");
    s.map_seen = shoald.Metric("shoal_detector_bpf_entries", "map=\"seen\"");
    s.watched = shoald.Metric("shoal_detector_watched_instances");
    s.anomalies = shoald.Metric("shoal_function_anomalies_total");
    return s;
  };
  const Sample before = take(0);
  auto job =
      with_fl
          ? shoald.Deploy(
                "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: soak\nspec:\n"
                "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 64, seed: 1}\n"
                "  data: {dataset: digits}\n  clients: {expected: 4}\n"
                "  stop: {rounds: 1000000, accuracy: 1.0}\n"
                "  training: {localSteps: 5, learningRate: 0.05, batchSize: 32}\n")
          : CliResult{0, "", ""};
  if (job.exit_code != 0) {
    std::fprintf(stderr, "deploy FL job failed: %s%s\n", job.out.c_str(), job.err.c_str());
    return 1;
  }
  const std::string token = with_fl ? shoald.CreateToken("fl-client", "", "soak") : "";
  std::map<int, std::string> names;

  std::fprintf(stderr,
               "[2/4] load for %d s: wrk -t%d -c%d on /fn/echo + 4 FL clients (warm-up %d s)\n",
               secs, workers, conns, warm_s);
  const auto start = Clock::now();
  shoal::bench::WrkResult wrk;
  std::thread wrk_thread(
      [&] { wrk = shoal::bench::RunWrk(shoald.port(), "/fn/echo", workers, conns, secs, script); });
  std::string client_out;
  int client_status = -1;
  std::thread client_thread([&] {
    if (!with_fl) {
      client_status = 0;
      return;
    }
    const std::string log = dir + "/client.log";
    pid_t pid = fork();
    if (pid == 0) {
      setenv("SHOAL_TOKEN", token.c_str(), 1);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string server = "http://127.0.0.1:" + std::to_string(shoald.port());
      const std::string max = std::to_string(secs);
      execl((BinDir() + "/shoal-client").c_str(), "shoal-client", "--server", server.c_str(),
            "--job", "soak", "--data", "digits", "--clients", "4", "--partition", "iid", "--seed",
            "3", "--time-scale", "0", "--max-seconds", max.c_str(), nullptr);
      _exit(127);
    }
    client_pid = pid;
    waitpid(pid, &client_status, 0);
    client_pid = 0;
    client_out = ReadFile(log);
  });
  std::vector<Sample> samples;
  while (Clock::now() - start < std::chrono::seconds(secs)) {
    std::this_thread::sleep_for(std::chrono::seconds(sample_s));
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    if (t > secs + 0.5) break;
    samples.push_back(take(t));
    for (const auto& [p, rss] : samples.back().rss) {
      if (!names.count(p)) names[p] = Comm(p);
    }
    std::fprintf(stderr,
                 "  t=%5.0f s: %zu processes, shoald RSS %ld KiB, pools free %.0f MiB, "
                 "BPF entries %.0f/%.0f, anomalies %.0f\n",
                 t, samples.back().rss.size(), samples.back().rss[shoald.pid()],
                 samples.back().pool_free / 1048576, samples.back().map_instances,
                 samples.back().map_seen, samples.back().anomalies);
  }
  wrk_thread.join();
  client_thread.join();
  auto status = json::parse(shoald.Api("GET", "/v1/jobs/soak").body, nullptr, false);
  const double updates = status.is_discarded() ? 0 : status.value("updates_total", 0.0);
  std::fprintf(stderr, "[3/4] load done; FL job deleted; letting the node settle 5 s\n");
  if (with_fl) shoald.Api("DELETE", "/v1/jobs/soak");
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const Sample after = take(secs + 5);
  const std::string echo_detector = [&] {
    auto j = json::parse(shoald.Api("GET", "/v1/functions/echo").body, nullptr, false);
    return j.is_discarded() ? std::string("?")
                            : j["status"].value("detector", json::object()).value("state", "?");
  }();
  std::fprintf(stderr, "[4/4] stopping shoald\n");
  const int shoald_pid = shoald.pid();
  shoald.Stop();

  // Per process: the samples after the warm-up.
  std::printf(
      "bench-soak: %d s at saturation (wrk -t%d -c%d POST 64 B /fn/echo) + FL job 'soak' "
      "(4 shoal-client clients, digits)%s; warm-up %d s; a sample every %d s; detector %s\n",
      secs, workers, conns, with_fl ? "" : " LEFT OUT (--no-fl)", warm_s, sample_s,
      detector_on   ? "on"
      : with_detect ? "OFF (could not load)"
                    : "off (--no-detect)");
  std::printf("%-8s %-16s %10s %10s %10s %10s %8s %6s %6s\n", "pid", "process", "RSS KiB", "min",
              "max", "last", "drift%", "fds0", "fds1");
  double worst_drift = 0, shoald_ratio = 0;
  bool rss_ok = true, fd_ok = true;
  for (const auto& [pid, name] : names) {
    std::vector<long> v;
    int fd0 = -1, fd1 = -1;
    for (const auto& s : samples) {
      if (s.t < warm_s) continue;
      auto it = s.rss.find(pid);
      if (it == s.rss.end()) continue;
      v.push_back(it->second);
      if (fd0 < 0) fd0 = s.fds.at(pid);
      fd1 = s.fds.at(pid);
    }
    if (v.empty()) continue;
    const long first = v.front();
    const long lo = *std::min_element(v.begin(), v.end()),
               hi = *std::max_element(v.begin(), v.end());
    const double drift = first > 0 ? 100.0 * std::max(hi - first, first - lo) / first : 0;
    const std::string label = pid == shoald_pid ? "shoald" : name;
    std::printf("%-8d %-16s %10ld %10ld %10ld %10ld %8.1f %6d %6d\n", pid, label.c_str(), first, lo,
                hi, v.back(), drift, fd0, fd1);
    // The client's RSS grows with its models by design; the node's processes must stay flat.
    const bool node_process = label != "shoal-client";
    if (node_process) {
      worst_drift = std::max(worst_drift, drift);
      if (drift > 5.0) rss_ok = false;
    }
    if (pid == shoald_pid) {
      shoald_ratio = first > 0 ? static_cast<double>(v.back()) / first : 0;
      if (fd1 > fd0) fd_ok = false;
    }
  }
  // Every buffer back (live_buffers); free bytes within 64 KiB of the start: the allocator's
  // own bookkeeping in the segment (its index, free-list nodes) is not given back.
  const bool pool_ok =
      after.pool_live == before.pool_live && std::abs(after.pool_free - before.pool_free) <= 65536;
  const bool maps_ok = after.map_instances == before.map_instances &&
                       after.map_seen <= before.map_seen + 64 * after.watched;
  const bool errors_ok = wrk.requests > 0 && wrk.errors == 0 && client_status == 0;
  const bool alarms_ok = after.anomalies == 0 && (detector_on || !with_detect);
  std::printf(
      "wrk: %ld requests, %.0f req/s (2xx %.0f), p50 %.3f ms, p99 %.3f ms, non-2xx %ld, socket "
      "errors %ld\n",
      wrk.requests, wrk.rps, wrk.good_rps, wrk.p50_ms, wrk.p99_ms, wrk.non2xx, wrk.socket_errors);
  std::printf("FL job: %.0f updates taken; shoal-client exit status %d\n", updates,
              WIFEXITED(client_status) ? WEXITSTATUS(client_status) : -1);
  std::printf("%-44s %16s %16s %s\n", "check", "before load", "after load", "");
  std::printf("%-44s %16.0f %16.0f %s\n", "pools' live buffers", before.pool_live, after.pool_live,
              after.pool_live == before.pool_live ? "ok" : "FAIL");
  std::printf("%-44s %16.0f %16.0f %s\n", "pools' free bytes (within 64 KiB)", before.pool_free,
              after.pool_free, pool_ok ? "ok" : "FAIL");
  std::printf("%-44s %16.0f %16.0f %s\n", "BPF map entries: instances (watched)",
              before.map_instances, after.map_instances, maps_ok ? "ok" : "FAIL");
  std::printf("%-44s %16.0f %16.0f\n", "BPF map entries: seen events", before.map_seen,
              after.map_seen);
  std::printf("%-44s %16.0f %16.0f\n", "instances watched by the detector", before.watched,
              after.watched);
  std::printf("%-44s %16d %16d %s\n", "shoald open fds (after warm-up -> end)",
              samples.empty()                         ? -1
              : samples.front().fds.count(shoald_pid) ? samples.front().fds.at(shoald_pid)
                                                      : -1,
              after.fds.count(shoald_pid) ? after.fds.at(shoald_pid) : -1, fd_ok ? "ok" : "FAIL");
  std::printf("%-44s %16s %16.0f %s\n", "anomalies (false alarms)", "", after.anomalies,
              alarms_ok ? "ok" : "FAIL");
  std::printf("echo's detector: %s\n", echo_detector.c_str());
  std::printf("RSS: worst drift of a node process %.1f %% (%s, bound 5 %%); errors %s\n",
              worst_drift, rss_ok ? "ok" : "FAIL", errors_ok ? "none" : "FAIL");
  if (!errors_ok)
    std::printf("wrk output:\n%s\nclient output (tail):\n%s\n", wrk.raw.c_str(),
                client_out.substr(client_out.size() > 2000 ? client_out.size() - 2000 : 0).c_str());
  const bool ok = rss_ok && fd_ok && pool_ok && maps_ok && errors_ok && alarms_ok;
  std::printf("soak: %s\n", ok ? "PASS" : "FAIL");
  std::printf("RESULT soak ratio=%.3f\n", shoald_ratio);
  (void)!system(("rm -rf '" + dir + "'").c_str());
  return ok ? 0 : 1;
}
