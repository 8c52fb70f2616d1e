// bench-cluster-hop: what a forward between nodes costs. A real three-node cluster (network
// namespaces, veth + bridge, etcd, shoal-controller: tests/support/netns_cluster.h) runs `echo`
// on one node H (scale {min: 1, max: 1}). One keep-alive client sends N sequential requests of
// --bytes each:
//   direct     to H's gateway (served where it enters),
//   forwarded  to another node A's gateway (A forwards to H over its pooled link, the answer
//              comes back through A).
// Anchor, in the same run: a plain TCP request-response of the same size over the same veths,
// a client thread in A's namespace and an echo thread in H's (setns), one persistent
// connection. The figure is the forward's added latency (forwarded p50 - direct p50) over the
// anchor's p50 round trip; target <= 1.2. Repeated --runs times (default 3) on one cluster,
// min/median/max printed; RESULT cluster_hop is the median.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "netns_peer.h"
#include "run_stats.h"
#include "tests/support/netns_cluster.h"

using namespace shoal::testing;
using shoal::bench::SpreadOf;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

double P50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// All `n` bytes through `io` (read or write); false on an error or an early end.
template <class Ptr, class Io>
bool AllBytes(Io io, int fd, Ptr p, size_t n) {
  while (n > 0) {
    const ssize_t done = io(fd, p, n);
    if (done <= 0) return false;
    p += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}
bool WriteAll(int fd, const char* p, size_t n) { return AllBytes(::write, fd, p, n); }
bool ReadExactly(int fd, char* p, size_t n) { return AllBytes(::read, fd, p, n); }

// One keep-alive HTTP connection: POST `body` to `path`, N times; the latencies in µs, or empty
// on an error (printed).
std::vector<double> HttpLatencies(const std::string& ip, const std::string& path,
                                  const std::string& body, int n) {
  std::vector<double> out;
  const int fd = shoal::bench::ConnectTcp(ip, TestCluster::kGatewayPort);
  if (fd < 0) return out;
  const std::string head = "POST " + path + " HTTP/1.1\r\nHost: bench\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n";
  std::string req = head + body;
  std::string buf(1 << 20, '\0');
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    if (!WriteAll(fd, req.data(), req.size())) break;
    size_t have = 0, end = std::string::npos;
    while (end == std::string::npos) {
      const ssize_t r = read(fd, buf.data() + have, buf.size() - have);
      if (r <= 0) break;
      have += static_cast<size_t>(r);
      end = std::string_view(buf.data(), have).find("\r\n\r\n");
    }
    if (end == std::string::npos) break;
    const std::string_view h(buf.data(), end);
    if (h.substr(0, 12) != "HTTP/1.1 200") {
      std::printf("  %s answered: %.*s\n", ip.c_str(),
                  static_cast<int>(std::min<size_t>(h.size(), 200)), h.data());
      break;
    }
    const size_t cl = h.find("Content-Length: ");
    const size_t len =
        cl == std::string_view::npos ? 0 : std::stoul(std::string(h.substr(cl + 16, 12)));
    const size_t need = end + 4 + len;
    if (need > have && !ReadExactly(fd, buf.data() + have, need - have)) break;
    out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  close(fd);
  if (static_cast<int>(out.size()) != n) {
    std::printf("  %s%s: %zu of %d requests answered\n", ip.c_str(), path.c_str(), out.size(), n);
    out.clear();
  }
  return out;
}

// The anchor: a client in `from_ns` and an echo server in `to_ns` (at `to_ip`), one persistent
// TCP connection, `bytes` each way, N times.
std::vector<double> TcpLatencies(const std::string& from_ns, const std::string& to_ns,
                                 const std::string& to_ip, size_t bytes, int n) {
  std::vector<double> out;
  std::atomic<int> port{0};
  std::thread server([&] {
    if (!shoal::bench::EnterNetns(to_ns)) {
      port = -1;
      return;
    }
    const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, to_ip.c_str(), &a.sin_addr);
    socklen_t len = sizeof a;
    if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      port = -1;
      close(ls);
      return;
    }
    port = ntohs(a.sin_port);
    const int c = accept(ls, nullptr, nullptr);
    close(ls);
    if (c < 0) return;
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string buf(bytes, '\0');
    while (ReadExactly(c, buf.data(), bytes) && WriteAll(c, buf.data(), bytes)) {
    }
    close(c);
  });
  std::thread client([&] {
    while (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (port < 0 || !shoal::bench::EnterNetns(from_ns)) return;
    const int fd = shoal::bench::ConnectTcp(to_ip, static_cast<uint16_t>(port.load()));
    if (fd < 0) return;
    std::string msg(bytes, 'x'), back(bytes, '\0');
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      if (!WriteAll(fd, msg.data(), bytes) || !ReadExactly(fd, back.data(), bytes)) break;
      out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    close(fd);
  });
  client.join();
  server.join();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3, requests = 2000;
  size_t bytes = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--requests")) requests = std::max(10, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--bytes"))
      bytes = static_cast<size_t>(std::max(1, std::atoi(argv[i + 1])));
  }
  if (auto why = NetnsMissing(); !why.empty()) {
    std::printf("bench-cluster-hop: SKIPPED: %s\n", why.c_str());
    return 0;
  }
  std::printf("bench-cluster-hop: 3 nodes, %d run(s) x %d sequential requests of %zu bytes\n", runs,
              requests, bytes);
  TestCluster cluster(TestCluster::Options{});
  std::string why;
  if (!cluster.Start(&why)) {
    std::printf("the cluster did not start: %s\n", why.c_str());
    return 1;
  }
  auto deploy = Http(
      cluster.controller_port(0), "POST", "/v1/functions",
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
      "spec:\n  handler:\n    builtin: echo\n  scale: {min: 1, max: 1}\n",
      {"Authorization: Bearer " + cluster.controller_token(), "Content-Type: application/yaml"}, 0,
      10000);
  if (deploy.status != 201) {
    std::printf("deploy: %d %s\n", deploy.status, deploy.body.c_str());
    return 1;
  }
  int home = -1;
  for (int tries = 0; tries < 100 && home < 0; ++tries) {
    auto r = cluster.ControllerApi(0, "GET", "/v1/functions/echo");
    auto j = json::parse(r.body, nullptr, false);
    if (r.status == 200 && !j.is_discarded() && j["placements"].size() == 1) {
      const std::string node = j["placements"][0]["node"].get<std::string>();
      for (int i = 0; i < cluster.nodes(); ++i) {
        if (cluster.node_name(i) == node) home = i;
      }
    }
    if (home < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (home < 0) {
    std::printf("echo was not placed\n");
    return 1;
  }
  const int entry = (home + 1) % cluster.nodes();
  std::printf("echo runs on %s (%s); forwarded requests enter %s (%s)\n",
              cluster.node_name(home).c_str(), cluster.node_ip(home).c_str(),
              cluster.node_name(entry).c_str(), cluster.node_ip(entry).c_str());
  const std::string body(bytes, 'b');
  // Warm: the instance answers on H, A's routes know H, A's link to H is open.
  for (int tries = 0; tries < 200; ++tries) {
    if (!HttpLatencies(cluster.node_ip(home), "/fn/echo", body, 5).empty() &&
        !HttpLatencies(cluster.node_ip(entry), "/fn/echo", body, 5).empty()) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("\n%-4s %12s %12s %12s %12s %9s\n", "run", "direct p50", "fwd p50", "added",
              "TCP p50", "ratio");
  std::vector<double> ratios, added_us, tcp_us;
  for (int run = 0; run < runs; ++run) {
    const auto direct = HttpLatencies(cluster.node_ip(home), "/fn/echo", body, requests);
    const auto forwarded = HttpLatencies(cluster.node_ip(entry), "/fn/echo", body, requests);
    const auto tcp = TcpLatencies(cluster.netns(entry), cluster.netns(home), cluster.node_ip(home),
                                  bytes, requests);
    if (direct.empty() || forwarded.empty() || tcp.empty()) {
      std::printf("run %d: a measurement failed\n", run);
      return 1;
    }
    const double d = P50(direct), f = P50(forwarded), t = P50(tcp);
    const double ratio = (f - d) / t;
    ratios.push_back(ratio);
    added_us.push_back(f - d);
    tcp_us.push_back(t);
    std::printf("%-4d %10.1fus %10.1fus %10.1fus %10.1fus %9.3f\n", run, d, f, f - d, t, ratio);
  }
  const auto r = SpreadOf(ratios);
  const auto a = SpreadOf(added_us);
  const auto t = SpreadOf(tcp_us);
  std::printf(
      "\nforward adds %.1f us (min %.1f, max %.1f); plain TCP round trip over the same "
      "veths %.1f us\n",
      a.median, a.min, a.max, t.median);
  std::printf("ratio (added / TCP round trip): min %.3f  median %.3f  max %.3f   (target <= 1.2)\n",
              r.min, r.median, r.max);
  std::printf("RESULT cluster_hop ratio=%.3f\n", r.median);
  return 0;
}
