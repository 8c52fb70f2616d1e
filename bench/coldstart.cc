// bench-coldstart: request-to-response time of a function scaled to zero (the request starts
// the instance), by start path: forked from the function's zygote (instance_start: zygote, the
// default) and a full spawn of shoal-fn (instance_start: spawn), one shoald each, interleaved,
// against the same request to a warm instance. Anchor: posix_spawn of /bin/true to its exit,
// measured in the same run (the floor of any process start); the full spawn's spawn -> ready
// is compared with it. Lower is better; targets: zygote cold p50 <= 2 ms, p99 <= 4 ms; full
// spawn of a built-in handler <= 3x /bin/true. Also where a zygote start's time goes (shoald's
// log of each start: taking the spare child forked ahead (or forking one now), cgroup + start,
// child to ready) and the bare process start of
// shoal-fn. --runs N cold starts per path (default 200) in --rounds R rounds (default 5): the
// ratios are given as min/median/max over the rounds.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "run_stats.h"
#include "tests/support/shoald_fixture.h"

using namespace shoal::testing;
using Clock = std::chrono::steady_clock;

using shoal::bench::Percentile;

namespace {

double TimeRequest(uint16_t port, const std::string& path, int* status) {
  const auto t0 = Clock::now();
  auto r = Http(port, "POST", path, "ping");
  const auto t1 = Clock::now();
  *status = r.status;
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// posix_spawn of `path` with an empty environment, to its exit, in ms.
double TimeSpawn(const std::string& path) {
  char* argv[] = {const_cast<char*>(path.c_str()), nullptr};
  char* envp[] = {nullptr};
  const auto t0 = Clock::now();
  pid_t pid = 0;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, envp) != 0) return -1;
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  waitpid(pid, &st, 0);
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

const char* kManifest =
    "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: cold\nspec:\n  handler:\n"
    "    builtin: echo\n  keepAlive: 20ms\n  scale: {min: 0, max: 1}\n";

struct Path {
  const char* name;
  Shoald shoald;
  std::vector<double> cold, spawn_to_ready;
  std::vector<std::vector<double>> cold_by_round, ready_by_round;
};

// One cold request: waits for zero instances, then times the request.
bool ColdOnce(Path& p, int* failures) {
  if (!p.shoald.WaitReady("cold", 0, 10000)) {
    std::fprintf(stderr, "%s: instance did not scale to zero\n", p.name);
    return false;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  int status = 0;
  const double ms = TimeRequest(p.shoald.port(), "/fn/cold", &status);
  if (status != 200) ++*failures;
  p.cold.push_back(ms);
  p.cold_by_round.back().push_back(ms);
  auto j = nlohmann::json::parse(p.shoald.Api("GET", "/v1/functions/cold").body, nullptr, false);
  if (!j.is_discarded()) {
    const double r = j["status"].value("last_cold_start_ms", 0.0);
    p.spawn_to_ready.push_back(r);
    p.ready_by_round.back().push_back(r);
  }
  return true;
}

struct Spread {
  double min, median, max;
};
Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), Percentile(v, 0.5), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200, rounds = 5;
  shoal::bench::Args args("bench-coldstart [--runs N] [--rounds R]");
  args.Option("--runs", &runs).Option("--rounds", &rounds);
  if (!args.Parse(argc, argv)) return 2;
  rounds = std::max(1, std::min(rounds, runs));
  Path zygote{"zygote", {}, {}, {}, {}, {}};
  Path spawn{"spawn", {}, {}, {}, {}, {}};
  for (Path* p : {&zygote, &spawn}) {
    Shoald::Options opts;
    opts.extra_yaml = std::string("control_interval_ms: 20\ninstance_start: ") + p->name + "\n";
    if (!p->shoald.Start(opts)) {
      std::fprintf(stderr, "shoald (%s) did not start:\n%s", p->name, p->shoald.Log().c_str());
      return 1;
    }
    auto d = p->shoald.Deploy(kManifest);
    if (d.exit_code != 0) {
      std::fprintf(stderr, "deploy failed: %s\n", d.err.c_str());
      return 1;
    }
  }
  int failures = 0;
  std::vector<double> warm, start_fn, start_true;
  std::vector<std::vector<double>> warm_by_round, true_by_round;
  const std::string fn =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "shoal-fn").string();
  for (int r = 0; r < rounds; ++r) {
    const int n = runs / rounds + (r < runs % rounds ? 1 : 0);
    for (Path* p : {&zygote, &spawn}) {
      p->cold_by_round.emplace_back();
      p->ready_by_round.emplace_back();
    }
    for (int i = 0; i < n; ++i) {
      if (!ColdOnce(zygote, &failures) || !ColdOnce(spawn, &failures)) return 1;
      std::fprintf(stderr, "\r[round %d/%d, cold %d/%d] zygote %.2f ms, spawn %.2f ms   ", r + 1,
                   rounds, i + 1, n, zygote.cold.back(), spawn.cold.back());
    }
    // Warm: the instance kept alive by back-to-back requests.
    warm_by_round.emplace_back();
    for (int i = 0; i <= n; ++i) {
      int status = 0;
      const double ms = TimeRequest(zygote.shoald.port(), "/fn/cold", &status);
      if (i > 0) {  // the first may still be a cold start
        warm.push_back(ms);
        warm_by_round.back().push_back(ms);
      }
      if (status != 200) ++failures;
    }
    // The anchor, and the bare start of shoal-fn, interleaved.
    true_by_round.emplace_back();
    for (int i = 0; i < n; ++i) {
      const double t = TimeSpawn("/bin/true");
      start_true.push_back(t);
      true_by_round.back().push_back(t);
      start_fn.push_back(TimeSpawn(fn));
    }
  }
  std::fprintf(stderr, "\n");
  // Where a zygote start goes, from shoald's log of each start.
  std::vector<double> fork_ms, release_ms, ready_ms, prepare_ms, spawn_prepare_ms;
  const std::string log = zygote.shoald.Log();
  const std::regex re(
      "cold start, zygote: (spare|fork) ([0-9.]+) ms, cgroup and release ([0-9.]+) ms, to ready "
      "([0-9.]+) ms; before it: endpoint, cgroup and pipes ([0-9.]+) ms");
  int from_spare = 0, forked_now = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    ((*it)[1] == "spare" ? from_spare : forked_now)++;
    fork_ms.push_back(std::stod((*it)[2]));
    release_ms.push_back(std::stod((*it)[3]));
    ready_ms.push_back(std::stod((*it)[4]));
    prepare_ms.push_back(std::stod((*it)[5]));
  }
  const std::string slog = spawn.shoald.Log();
  const std::regex sre("cold start, spawn; before it: endpoint, cgroup and pipes ([0-9.]+) ms");
  for (auto it = std::sregex_iterator(slog.begin(), slog.end(), sre); it != std::sregex_iterator();
       ++it) {
    spawn_prepare_ms.push_back(std::stod((*it)[1]));
  }
  const bool spawn_fell_back = log.find("(cold start, spawn") != std::string::npos;
  zygote.shoald.Stop();
  spawn.shoald.Stop();

  std::printf(
      "bench-coldstart: %d cold starts per path in %d rounds, echo, new connection per "
      "request, lower is better\n",
      runs, rounds);
  std::printf("%-44s %10s %10s\n", "", "p50 ms", "p99 ms");
  auto row = [](const char* name, const std::vector<double>& v) {
    std::printf("%-44s %10.3f %10.3f\n", name, Percentile(v, 0.5), Percentile(v, 0.99));
  };
  row("cold, zygote fork (request to response)", zygote.cold);
  row("  of which start -> ready", zygote.spawn_to_ready);
  row("    take the spare / fork now", fork_ms);
  row("    cgroup move + release", release_ms);
  row("    child to ready (reported)", ready_ms);
  row("  before start: endpoint, cgroup, pipes", prepare_ms);
  row("cold, full spawn (request to response)", spawn.cold);
  row("  of which spawn -> ready", spawn.spawn_to_ready);
  row("  before spawn: endpoint, cgroup, pipes", spawn_prepare_ms);
  row("warm", warm);
  row("process start: shoal-fn (exits at once)", start_fn);
  row("process start: /bin/true (anchor)", start_true);
  // Ratios per round: min/median/max.
  std::vector<double> r_zw, r_sz, r_st, r_zt;
  for (int r = 0; r < rounds; ++r) {
    const double z = Percentile(zygote.cold_by_round[r], 0.5);
    const double s = Percentile(spawn.cold_by_round[r], 0.5);
    const double w = Percentile(warm_by_round[r], 0.5);
    const double t = Percentile(true_by_round[r], 0.5);
    r_zw.push_back(z / w);
    r_sz.push_back(s / z);
    r_st.push_back(Percentile(spawn.ready_by_round[r], 0.5) / t);
    r_zt.push_back(Percentile(zygote.ready_by_round[r], 0.5) / t);
  }
  auto ratio = [](const char* name, const std::vector<double>& v) {
    const Spread s = SpreadOf(v);
    std::printf("%-60s %6.2f %6.2f %6.2f\n", name, s.min, s.median, s.max);
  };
  std::printf("zygote starts from the spare forked ahead: %d, forked on the request's path: %d\n",
              from_spare, forked_now);
  std::printf("%-60s %6s %6s %6s\n", "ratio of p50s, per round", "min", "median", "max");
  ratio("cold zygote / warm", r_zw);
  ratio("cold full spawn / cold zygote", r_sz);
  ratio("full spawn: spawn -> ready / /bin/true start (target <= 3)", r_st);
  ratio("zygote: start -> ready / /bin/true start", r_zt);
  const double z50 = Percentile(zygote.cold, 0.5), z99 = Percentile(zygote.cold, 0.99);
  std::printf(
      "zygote cold p50 target <= 2 ms: %s (%.3f); p99 target <= 4 ms: %s (%.3f); full "
      "spawn <= 3x /bin/true: %s (%.2f); failed requests %d%s\n",
      z50 <= 2 ? "met" : "MISSED", z50, z99 <= 4 ? "met" : "MISSED", z99,
      SpreadOf(r_st).median <= 3 ? "met" : "MISSED", SpreadOf(r_st).median, failures,
      spawn_fell_back ? "; WARNING: some zygote-path starts fell back to a spawn" : "");
  std::printf("RESULT coldstart ratio=%.3f\n", SpreadOf(r_zw).median);
  return failures == 0 ? 0 : 1;
}
