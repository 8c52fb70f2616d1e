// wrk as the benchmarks run it: one command, its output parsed (req/s, latency percentiles,
// non-2xx, socket errors). Shared by bench-invoke, bench-infer-http, bench-soak and bench-detect.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

namespace shoal::bench {

struct WrkResult {
  double rps = 0;       // wrk's Requests/sec: every response, whatever its status
  double good_rps = 0;  // (responses - non-2xx - read/write/timeout errors) / duration
  double p50_ms = 0;
  double p99_ms = 0;
  long requests = 0;
  long non2xx = 0;
  long socket_errors = 0;  // connect + read + write + timeout
  long errors = 0;         // non2xx + socket_errors
  std::string raw;
};

// Whether wrk (and nginx, for a bench whose anchor it is) is installed; when not, `bench` says so
// on stderr and prints its RESULT line as nan (`result`: the name in that line).
inline bool WrkInstalled(const char* bench, const char* result, bool nginx = false) {
  if (system(nginx ? "command -v wrk >/dev/null && command -v nginx >/dev/null"
                   : "command -v wrk >/dev/null") == 0) {
    return true;
  }
  std::fprintf(stderr,
               nginx ? "%s needs wrk and nginx (Debian packages wrk, nginx-light)\n"
                     : "%s needs wrk (Debian package wrk)\n",
               bench);
  std::printf("RESULT %s ratio=nan\n", result);
  return false;
}

inline double WrkToMs(const std::string& v, const std::string& unit) {
  double x = std::stod(v);
  if (unit == "us") return x / 1000;
  if (unit == "s") return x * 1000;
  return x;
}

inline WrkResult ParseWrk(std::string raw) {
  WrkResult r;
  r.raw = std::move(raw);
  std::smatch m;
  if (std::regex_search(r.raw, m, std::regex("Requests/sec:\\s+([0-9.]+)")))
    r.rps = std::stod(m[1]);
  if (std::regex_search(r.raw, m, std::regex("\\s50%\\s+([0-9.]+)(us|ms|s)")))
    r.p50_ms = WrkToMs(m[1], m[2]);
  if (std::regex_search(r.raw, m, std::regex("\\s99%\\s+([0-9.]+)(us|ms|s)")))
    r.p99_ms = WrkToMs(m[1], m[2]);
  double duration_s = 0;
  if (std::regex_search(r.raw, m, std::regex("([0-9]+) requests in ([0-9.]+)(us|ms|s|m)"))) {
    r.requests = std::stol(m[1]);
    duration_s = std::stod(m[2]) * (m[3] == "m"    ? 60
                                    : m[3] == "ms" ? 1e-3
                                    : m[3] == "us" ? 1e-6
                                                   : 1);
  }
  if (std::regex_search(r.raw, m, std::regex("Non-2xx or 3xx responses:\\s+([0-9]+)")))
    r.non2xx = std::stol(m[1]);
  long lost = 0;
  if (std::regex_search(r.raw, m,
                        std::regex("Socket errors: connect ([0-9]+), read ([0-9]+), write "
                                   "([0-9]+), timeout ([0-9]+)"))) {
    r.socket_errors = std::stol(m[1]) + std::stol(m[2]) + std::stol(m[3]) + std::stol(m[4]);
    lost = std::stol(m[2]) + std::stol(m[3]) + std::stol(m[4]);
  }
  r.errors = r.non2xx + r.socket_errors;
  if (duration_s > 0) {
    r.good_rps = static_cast<double>(std::max(0L, r.requests - r.non2xx - lost)) / duration_s;
  }
  return r;
}

// "wrk --latency -tT -cC -dSs [--timeout Ts] -s script http://127.0.0.1:port/path 2>&1";
// timeout_s 0 keeps wrk's 2 s (a request slower than that counts as a timeout, not a latency).
inline std::string WrkCommand(uint16_t port, const std::string& path, int threads, int conns,
                              int secs, const std::string& script, int timeout_s = 0) {
  return "wrk --latency -t" + std::to_string(threads) + " -c" + std::to_string(conns) + " -d" +
         std::to_string(secs) + "s" +
         (timeout_s > 0 ? " --timeout " + std::to_string(timeout_s) + "s" : std::string()) +
         " -s " + script + " http://127.0.0.1:" + std::to_string(port) + path + " 2>&1";
}

inline WrkResult RunWrk(uint16_t port, const std::string& path, int threads, int conns, int secs,
                        const std::string& script, int timeout_s = 0) {
  std::string raw;
  FILE* p = popen(WrkCommand(port, path, threads, conns, secs, script, timeout_s).c_str(), "r");
  char buf[4096];
  while (p != nullptr && fgets(buf, sizeof buf, p)) raw += buf;
  if (p != nullptr) pclose(p);
  return ParseWrk(std::move(raw));
}

}  // namespace shoal::bench
