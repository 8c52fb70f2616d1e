// bench-coldstart: request-to-response time of a function scaled to zero (the request starts
// the instance: spawn, pool attach, handler load, ready, dispatch), 50 runs, against the same
// request to a warm instance. Lower is better; target cold p50 <= 10 ms. Also the bare process
// start of shoal-fn (the dynamic loader's work and static initialisers: it exits after reading
// its environment) against /bin/true's, interleaved, the floor under any full spawn.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "shoald_fixture.h"

using namespace shoal::testing;
using Clock = std::chrono::steady_clock;

namespace {

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t idx = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[idx];
}

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

}  // namespace

int main(int argc, char** argv) {
  int runs = 50;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--runs") runs = std::stoi(argv[++i]);
  }
  Shoald shoald;
  Shoald::Options opts;
  opts.extra_yaml = "control_interval_ms: 20\n";
  if (!shoald.Start(opts)) {
    std::fprintf(stderr, "shoald did not start:\n%s", shoald.Log().c_str());
    return 1;
  }
  auto d = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: cold\nspec:\n  handler:\n"
      "    builtin: echo\n  keepAlive: 20ms\n  scale: {min: 0, max: 1}\n");
  if (d.exit_code != 0) {
    std::fprintf(stderr, "deploy failed: %s\n", d.err.c_str());
    return 1;
  }
  std::vector<double> cold, warm, spawn_to_ready;
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    if (!shoald.WaitReady("cold", 0, 10000)) {
      std::fprintf(stderr, "instance did not scale to zero\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    int status = 0;
    cold.push_back(TimeRequest(shoald.port(), "/fn/cold", &status));
    if (status != 200) ++failures;
    auto j = nlohmann::json::parse(shoald.Api("GET", "/v1/functions/cold").body, nullptr, false);
    if (!j.is_discarded()) spawn_to_ready.push_back(j["status"].value("last_cold_start_ms", 0.0));
    std::fprintf(stderr, "\r[cold %d/%d] %.2f ms   ", i + 1, runs, cold.back());
  }
  std::fprintf(stderr, "\n");
  // Warm: keep the instance alive with back-to-back requests.
  for (int i = 0; i < runs; ++i) {
    int status = 0;
    const double ms = TimeRequest(shoald.port(), "/fn/cold", &status);
    if (i > 0) warm.push_back(ms);  // the first may still be a cold start
    if (status != 200) ++failures;
  }
  shoald.Stop();
  // Process start floor: shoal-fn against /bin/true, interleaved, 4x the runs (at least 200).
  const std::string fn =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "shoal-fn").string();
  std::vector<double> start_fn, start_true;
  for (int i = 0; i < std::max(200, 4 * runs); ++i) {
    start_true.push_back(TimeSpawn("/bin/true"));
    start_fn.push_back(TimeSpawn(fn));
  }
  const double c50 = Percentile(cold, 0.5), c99 = Percentile(cold, 0.99);
  const double w50 = Percentile(warm, 0.5), w99 = Percentile(warm, 0.99);
  const double s50 = spawn_to_ready.empty() ? 0 : Percentile(spawn_to_ready, 0.5);
  std::printf("bench-coldstart: %d runs, echo, new connection per request, lower is better\n", runs);
  std::printf("%-34s %10s %10s\n", "", "p50 ms", "p99 ms");
  std::printf("%-34s %10.3f %10.3f\n", "cold (scaled to zero)", c50, c99);
  std::printf("%-34s %10.3f %10s\n", "  of which spawn -> ready", s50, "");
  std::printf("%-34s %10.3f %10.3f\n", "warm", w50, w99);
  const double f50 = Percentile(start_fn, 0.5), t50 = Percentile(start_true, 0.5);
  std::printf("%-34s %10.3f %10.3f\n", "process start: shoal-fn", f50,
              Percentile(start_fn, 0.99));
  std::printf("%-34s %10.3f %10.3f\n", "process start: /bin/true (anchor)", t50,
              Percentile(start_true, 0.99));
  std::printf("ratio process start shoal-fn / /bin/true p50 = %.2f (%zu spawns each, "
              "interleaved)\n", f50 / t50, start_fn.size());
  std::printf("ratio cold p50 / warm p50 = %.2f; cold p50 target <= 10 ms: %s; failed requests %d\n",
              c50 / w50, c50 <= 10 ? "met" : "MISSED", failures);
  std::printf("RESULT coldstart ratio=%.3f\n", c50 / w50);
  return failures == 0 ? 0 : 1;
}
