// bench-hop: one descriptor round trip gateway -> instance -> gateway between two processes,
// through the sk_msg redirect on the SOCKHASH (the real SockmapDataPlane and SockmapChannel)
// and, measured in the same run as anchors, plain loopback TCP (TCP_NODELAY) and a unix
// socketpair. Every transport uses the same channel code (SockmapChannel reads a byte
// stream), so only the kernel path differs. The waiting side blocks in epoll_wait. The whole
// set of configs runs --runs times (default 3); the ratios' min/median/max follow the per-run
// tables and RESULT carries the cross-core median.
//
//   bench-hop [--iterations N (100000)] [--runs N (3)] [--only SUBSTRING]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "run_stats.h"
#include "shoal/common/descriptor.h"
#include "shoal/dataplane/channel/channel.h"
#include "shoal/dataplane/channel/dataplane.h"
#include "shoal/dataplane/channel/sockmap_channel.h"

namespace shoal {
namespace {

constexpr uint32_t kGateway = GatewayEndpoint(0);
constexpr uint32_t kInstance = 0x00010001u;

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "sched_setaffinity(%d): %s\n", cpu, std::strerror(errno));
  }
}

// Blocks in epoll_wait until one descriptor is in `d` (no busy polling).
bool ReceiveOne(DescriptorChannel& ch, int ep, EventDescriptor& d) {
  for (;;) {
    auto n = ch.Receive(std::span(&d, 1));
    if (!n.ok()) return false;
    if (*n == 1) return true;
    epoll_event ev{};
    if (epoll_wait(ep, &ev, 1, -1) < 0 && errno != EINTR) return false;
  }
}

bool SendOne(DescriptorChannel& ch, const EventDescriptor& d) {
  for (;;) {
    Status st = ch.Send(d);
    if (st.ok()) return true;
    if (st.code() != StatusCode::kResourceExhausted) {
      std::fprintf(stderr, "send: %s\n", st.ToString().c_str());
      return false;
    }
    sched_yield();
  }
}

int MakeEpoll(int fd) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  return ep;
}

struct Stats {
  double p50_us = NAN;
  double p99_us = NAN;
};

// Runs warmup + iterations round trips; `gateway_fd` stays here, `instance_fd` goes to the
// child (both are owned and closed).
std::optional<Stats> RoundTrips(int gateway_fd, int instance_fd, int child_cpu, int iterations,
                                int warmup) {
  const int total = warmup + iterations;
  PinToCpu(0);
  pid_t child = fork();
  if (child < 0) return std::nullopt;
  if (child == 0) {
    close(gateway_fd);
    PinToCpu(child_cpu);
    SockmapChannel ch(instance_fd);
    int ep = MakeEpoll(ch.fd());
    EventDescriptor d{};
    for (int i = 0; i < total; ++i) {
      if (!ReceiveOne(ch, ep, d)) _exit(2);
      d.target = d.source;
      d.source = kInstance;
      d.kind = static_cast<uint16_t>(EventKind::kPong);
      if (!SendOne(ch, d)) _exit(3);
    }
    _exit(0);
  }
  close(instance_fd);
  SockmapChannel ch(gateway_fd);
  int ep = MakeEpoll(ch.fd());
  std::vector<uint64_t> rtt;
  rtt.reserve(static_cast<size_t>(iterations));
  EventDescriptor d{};
  d.version = kDescriptorVersion;
  d.function_id = 1;
  d.source = kGateway;
  bool ok = true;
  for (int i = 0; i < total && ok; ++i) {
    d.target = kInstance;
    d.source = kGateway;
    d.kind = static_cast<uint16_t>(EventKind::kPing);
    d.request_id = static_cast<uint64_t>(i);
    const uint64_t t0 = NowNs();
    d.timestamp_ns = t0;
    ok = SendOne(ch, d) && ReceiveOne(ch, ep, d);
    const uint64_t t1 = NowNs();
    ok = ok && d.request_id == static_cast<uint64_t>(i) && d.target == kGateway;
    if (i >= warmup) rtt.push_back(t1 - t0);
  }
  close(ep);
  int status = 0;
  if (!ok) kill(child, SIGKILL);
  waitpid(child, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  std::sort(rtt.begin(), rtt.end());
  Stats s;
  s.p50_us = static_cast<double>(rtt[rtt.size() / 2]) / 1000.0;
  s.p99_us = static_cast<double>(rtt[rtt.size() * 99 / 100]) / 1000.0;
  return s;
}

bool TcpPair(int fds[2]) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(l);
    return false;
  }
  fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
  fds[1] = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  close(l);
  int one = 1;
  for (int i = 0; i < 2; ++i) setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fds[1] >= 0;
}

struct Row {
  std::string name;
  std::optional<Stats> stats;
  double anchor_p50 = NAN;  // loopback TCP p50 with the same placement
};

int Main(int argc, char** argv) {
  int iterations = 100000;
  int runs = 3;
  std::string only;  // profiling aid: run only the configs whose name contains this
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--runs N] [--only SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  if (iterations < 100) iterations = 100;
  const int warmup = std::min(10000, iterations / 10);
  spdlog::set_level(spdlog::level::warn);  // stdout carries only the table

  // The sockmap data plane, loaded once for the whole run.
  NodeConfig config;
  config.node_name = "bench-hop-" + std::to_string(getpid());
  config.bpf_pin_root = "/sys/fs/bpf/shoal-bench-" + std::to_string(getpid());
  config.dataplane = DataPlaneMode::kSockmap;
  config.log_level = "warn";
  std::string skip_reason;
  std::unique_ptr<DataPlane> dp;
  if (geteuid() != 0) {
    skip_reason = "not root (euid " + std::to_string(geteuid()) + "): BPF cannot be loaded";
  } else {
    auto r = CreateDataPlane(config);
    if (r.ok()) {
      dp = std::move(r).value();
    } else {
      skip_reason = r.status().ToString();
    }
  }
  if (!dp) std::fprintf(stderr, "sk_msg skipped: %s\n", skip_reason.c_str());

  std::vector<std::vector<Row>> all_runs;
  for (int run = 0; run < runs; ++run) {
    std::fprintf(stderr, "bench-hop: run %d of %d\n", run + 1, runs);
    std::vector<Row> rows;
    for (const auto& [placement, child_cpu] : {std::pair<const char*, int>{"cross-core", 1},
                                               std::pair<const char*, int>{"same-core", 0}}) {
      Row sk{std::string("sk_msg redirect, ") + placement, std::nullopt};
      auto wanted = [&](const Row& r) { return r.name.find(only) != std::string::npos; };
      if (dp && wanted(sk)) {
        std::fprintf(stderr, "sk_msg %s: %d round trips...\n", placement, iterations);
        auto gw = dp->CreateEndpoint(kGateway);
        auto inst = dp->CreateEndpoint(kInstance);
        if (gw.ok() && inst.ok()) {
          sk.stats = RoundTrips(gw->ReleaseFd(), inst->ReleaseFd(), child_cpu, iterations, warmup);
        }
        dp->RemoveEndpoint(kGateway);
        dp->RemoveEndpoint(kInstance);
      }
      Row tcp{std::string("loopback TCP, ") + placement, std::nullopt};
      int fds[2];
      if (wanted(tcp) && TcpPair(fds)) {
        std::fprintf(stderr, "loopback TCP %s...\n", placement);
        tcp.stats = RoundTrips(fds[0], fds[1], child_cpu, iterations, warmup);
      }
      Row unix_pair{std::string("unix socketpair, ") + placement, std::nullopt};
      if (wanted(unix_pair) && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0) {
        std::fprintf(stderr, "unix socketpair %s...\n", placement);
        unix_pair.stats = RoundTrips(fds[0], fds[1], child_cpu, iterations, warmup);
      }
      const double anchor = tcp.stats ? tcp.stats->p50_us : NAN;
      for (Row* r : {&sk, &tcp, &unix_pair}) {
        r->anchor_p50 = anchor;
        rows.push_back(*r);
      }
    }
    all_runs.push_back(std::move(rows));
  }
  dp.reset();
  std::error_code ec;
  std::filesystem::remove_all(config.bpf_pin_root, ec);

  std::printf(
      "bench-hop: 64-byte descriptor round trip gateway -> instance -> gateway, two "
      "processes, %d round trips per config after %d warm-up, waiting in epoll_wait\n",
      iterations, warmup);
  std::printf(
      "lower is better; ratio = p50 / loopback TCP p50 of the same placement "
      "(anchors measured in this run)\n");
  // Per config, the ratio of each run (NaN where a run skipped it).
  std::vector<std::vector<double>> ratios(all_runs[0].size());
  for (size_t run = 0; run < all_runs.size(); ++run) {
    const std::vector<Row>& rows = all_runs[run];
    std::printf("run %zu/%d\n", run + 1, runs);
    std::printf("%-32s %10s %10s %12s\n", "config", "p50 us", "p99 us", "ratio vs TCP");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (r.stats) {
        ratios[i].push_back(r.stats->p50_us / r.anchor_p50);
        std::printf("%-32s %10.2f %10.2f %12.3f\n", r.name.c_str(), r.stats->p50_us,
                    r.stats->p99_us, r.stats->p50_us / r.anchor_p50);
      } else {
        ratios[i].push_back(NAN);
        std::printf("%-32s %10s %10s %12s\n", r.name.c_str(), "skipped", "-", "-");
      }
    }
  }
  std::printf("ratio vs TCP over %d run(s) (target for sk_msg cross-core: <= 0.8)\n", runs);
  std::printf("%-32s %10s %10s %10s\n", "config", "min", "median", "max");
  for (size_t i = 0; i < ratios.size(); ++i) {
    const shoal::bench::Spread sp = shoal::bench::SpreadOf(ratios[i]);
    if (std::isnan(sp.median)) continue;
    std::printf("%-32s %10.3f %10.3f %10.3f\n", all_runs[0][i].name.c_str(), sp.min, sp.median,
                sp.max);
  }
  if (!skip_reason.empty()) std::printf("sk_msg skipped: %s\n", skip_reason.c_str());
  // Row 0 is sk_msg cross-core; its ratio is NaN in any run that lacks it or its anchor.
  const double ratio = shoal::bench::SpreadOf(ratios[0]).median;
  if (std::isnan(ratio)) {
    std::printf("RESULT hop ratio=nan\n");
  } else {
    std::printf("RESULT hop ratio=%.3f\n", ratio);
  }
  return 0;
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) { return shoal::Main(argc, argv); }
