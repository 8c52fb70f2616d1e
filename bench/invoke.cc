// bench-invoke: HTTP throughput and latency of a warm function (/fn/echo, 64-byte body)
// against nginx answering `return 200` with the same worker count, both loaded by the same
// wrk command in the same run. Higher req/s is better; lower p99 is better.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "shoald_fixture.h"

using namespace shoal::testing;

namespace {

struct WrkResult {
  double rps = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  long errors = 0;
  std::string raw;
};

double ToMs(const std::string& v, const std::string& unit) {
  double x = std::stod(v);
  if (unit == "us") return x / 1000;
  if (unit == "s") return x * 1000;
  return x;
}

WrkResult RunWrk(uint16_t port, const std::string& path, int threads, int conns, int secs,
                 const std::string& script) {
  std::string cmd = "wrk --latency -t" + std::to_string(threads) + " -c" + std::to_string(conns) +
                    " -d" + std::to_string(secs) + "s -s " + script + " http://127.0.0.1:" +
                    std::to_string(port) + path + " 2>&1";
  WrkResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) r.raw += buf;
  pclose(p);
  std::smatch m;
  if (std::regex_search(r.raw, m, std::regex("Requests/sec:\\s+([0-9.]+)"))) r.rps = std::stod(m[1]);
  if (std::regex_search(r.raw, m, std::regex("\\s50%\\s+([0-9.]+)(us|ms|s)")))
    r.p50_ms = ToMs(m[1], m[2]);
  if (std::regex_search(r.raw, m, std::regex("\\s99%\\s+([0-9.]+)(us|ms|s)")))
    r.p99_ms = ToMs(m[1], m[2]);
  if (std::regex_search(r.raw, m, std::regex("Non-2xx or 3xx responses:\\s+([0-9]+)")))
    r.errors += std::stol(m[1]);
  if (std::regex_search(r.raw, m, std::regex("Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)")))
    r.errors += std::stol(m[1]) + std::stol(m[2]) + std::stol(m[3]) + std::stol(m[4]);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int secs = 10, conns = 64;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--seconds") secs = std::stoi(argv[++i]);
    if (std::string(argv[i]) == "--connections") conns = std::stoi(argv[++i]);
  }
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int wrk_threads = std::max(1, workers);
  if (system("command -v wrk >/dev/null && command -v nginx >/dev/null") != 0) {
    std::fprintf(stderr, "bench-invoke needs wrk and nginx (Debian packages wrk, nginx-light)\n");
    std::printf("RESULT invoke ratio=nan\n");
    return 1;
  }
  char tmpl[] = "/tmp/shoal-bench-invoke-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string body(64, 'x');
  const std::string script = dir + "/post.lua";
  std::ofstream(script) << "wrk.method = \"POST\"\nwrk.body = \"" << body
                        << "\"\nwrk.headers[\"Content-Type\"] = \"text/plain\"\n";

  std::fprintf(stderr, "[1/4] starting shoald (%d event loops) and deploying echo\n", workers);
  Shoald shoald;
  Shoald::Options opts;
  opts.threads = static_cast<uint32_t>(workers);
  if (!shoald.Start(opts)) {
    std::fprintf(stderr, "shoald did not start:\n%s", shoald.Log().c_str());
    return 1;
  }
  auto d = shoald.Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\nspec:\n  handler:\n"
      "    builtin: echo\n  concurrency: 1024\n  scale: {min: 1, max: 1}\n");
  if (d.exit_code != 0 || !shoald.WaitReady("echo", 1)) {
    std::fprintf(stderr, "deploy failed: %s\n", d.err.c_str());
    return 1;
  }
  const std::string mode = shoald.Metric("shoal_dataplane_mode", "mode=\"sockmap\"") == 1 ? "sockmap" : "unix";

  std::fprintf(stderr, "[2/4] starting nginx (%d workers, return 200)\n", workers);
  const uint16_t nginx_port = static_cast<uint16_t>(shoald.port() + 1);
  const std::string conf = dir + "/nginx.conf";
  std::ofstream(conf) << "worker_processes " << workers << ";\npid " << dir
                      << "/nginx.pid;\nerror_log " << dir << "/error.log;\ndaemon off;\n"
                      << "events { worker_connections 4096; }\nhttp {\n access_log off;\n"
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

  std::fprintf(stderr, "[3/4] wrk -t%d -c%d -d%ds against shoal /fn/echo\n", wrk_threads, conns, secs);
  RunWrk(shoald.port(), "/fn/echo", wrk_threads, conns, 1, script);  // warm-up
  WrkResult s = RunWrk(shoald.port(), "/fn/echo", wrk_threads, conns, secs, script);
  std::fprintf(stderr, "[4/4] same wrk against nginx\n");
  RunWrk(nginx_port, "/", wrk_threads, conns, 1, script);
  WrkResult n = RunWrk(nginx_port, "/", wrk_threads, conns, secs, script);
  kill(nginx, SIGTERM);
  waitpid(nginx, nullptr, 0);
  const auto served = shoald.Metric("shoal_requests_total", "code=\"200\",function=\"echo\"");
  shoald.Stop();

  const double ratio = n.rps > 0 ? s.rps / n.rps : 0;
  const double p99_ratio = n.p99_ms > 0 ? s.p99_ms / n.p99_ms : 0;
  std::printf("bench-invoke: POST 64 B, wrk -t%d -c%d -d%ds, %d server workers, data plane %s\n",
              wrk_threads, conns, secs, workers, mode.c_str());
  std::printf("%-22s %12s %10s %10s %8s\n", "server", "req/s", "p50 ms", "p99 ms", "errors");
  std::printf("%-22s %12.0f %10.3f %10.3f %8ld\n", "shoal /fn/echo", s.rps, s.p50_ms, s.p99_ms, s.errors);
  std::printf("%-22s %12.0f %10.3f %10.3f %8ld\n", "nginx return 200", n.rps, n.p50_ms, n.p99_ms, n.errors);
  std::printf("ratio req/s shoal/nginx = %.3f (higher is better, target >= 0.7)\n", ratio);
  std::printf("ratio p99 shoal/nginx   = %.3f (lower is better, target <= 2)\n", p99_ratio);
  std::printf("shoal counted %.0f echo responses with status 200\n", served);
  std::printf("RESULT invoke ratio=%.3f\n", ratio);
  return 0;
}
