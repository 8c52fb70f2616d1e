// Cross-node routing on a real cluster (three shoalds in network namespaces, real etcd, a real
// shoal-controller): a request entering a node that does not run its function is forwarded to
// the node that does over a pooled TCP link, body streamed both ways, and answered byte for
// byte; a cold start there makes it wait, not fail; a request a node forwarded is never
// forwarded again; the forward is counted per function and node; a lost node's function is
// served again once placement moved it; /readyz shows the node's etcd link.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "netns_cluster.h"

namespace shoal::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool WaitFor(const std::function<bool()>& f, std::chrono::milliseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return f();
}

// The value of `family{labels...}` in a Prometheus text page (-1 when absent); `labels` is the
// exact label set as the page prints it.
double Metric(const std::string& page, const std::string& family, const std::string& labels) {
  const std::string key = family + "{" + labels + "} ";
  const size_t at = page.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + key.size()));
}

class ClusterForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsMissing(); !why.empty()) GTEST_SKIP() << why;
    cluster_ = std::make_unique<TestCluster>(TestCluster::Options{});
    std::string why;
    ASSERT_TRUE(cluster_->Start(&why)) << why;
  }
  void TearDown() override {
    if (HasFailure() && cluster_) {
      for (int i = 0; i < cluster_->nodes(); ++i) {
        std::cerr << "---- " << cluster_->node_name(i) << " ----\n" << cluster_->NodeLog(i);
      }
      std::cerr << "---- controller ----\n" << cluster_->ControllerLog(0);
    }
  }
  HttpResult Deploy(const std::string& yaml) {
    return Http(cluster_->controller_port(0), "POST", "/v1/functions", yaml,
                {"Authorization: Bearer " + cluster_->controller_token(),
                 "Content-Type: application/yaml"},
                0, 10000);
  }
  // The nodes `fn` is placed on, from the controller.
  std::vector<std::string> PlacedOn(const std::string& fn) {
    std::vector<std::string> out;
    auto r = cluster_->ControllerApi(0, "GET", "/v1/functions/" + fn);
    auto j = json::parse(r.body, nullptr, false);
    if (r.status != 200 || j.is_discarded() || !j.contains("placements")) return out;
    for (const auto& p : j["placements"]) out.push_back(p["node"].get<std::string>());
    return out;
  }
  int IndexOf(const std::string& node) {
    for (int i = 0; i < cluster_->nodes(); ++i) {
      if (cluster_->node_name(i) == node) return i;
    }
    return -1;
  }
  std::unique_ptr<TestCluster> cluster_;
};

// Sends `raw` on one connection to ip:port and reads until `responses` answers ended (each
// with Content-Length) or the peer closed; the bytes read.
std::string RawExchange(const std::string& ip, uint16_t port, const std::string& raw,
                        int responses) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "connect failed";
  }
  size_t off = 0;
  while (off < raw.size()) {
    const ssize_t n = write(fd, raw.data() + off, raw.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string got;
  char buf[65536];
  auto complete = [&] {
    size_t pos = 0;
    for (int k = 0; k < responses; ++k) {
      const size_t end = got.find("\r\n\r\n", pos);
      if (end == std::string::npos) return false;
      std::smatch m;
      const std::string head = got.substr(pos, end - pos);
      if (!std::regex_search(head, m, std::regex("Content-Length: (\\d+)", std::regex::icase))) {
        return false;
      }
      pos = end + 4 + std::stoul(m[1]);
      if (pos > got.size()) return false;
    }
    return true;
  };
  while (!complete()) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}

TEST_F(ClusterForwardTest, ARequestEnteringAnyNodeIsAnsweredByTheNodeThatRunsItsFunction) {
  // One instance at most, none kept warm: placed on one node, cold until the first request.
  auto r = Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
      "spec:\n  handler:\n    builtin: echo\n  scale: {min: 0, max: 1}\n");
  ASSERT_EQ(r.status, 201) << r.body;
  std::vector<std::string> placed;
  ASSERT_TRUE(WaitFor([&] { return (placed = PlacedOn("echo")).size() == 1; }, 10s));
  const int home = IndexOf(placed[0]);
  ASSERT_GE(home, 0);
  const int a = (home + 1) % 3, b = (home + 2) % 3;
  ASSERT_TRUE(WaitFor([&] { return cluster_->NodeGateway(home, "POST", "/fn/echo", "x").status == 200; },
                      15s));
  // The first forwarded request may meet the instance's cold start there; it waits, it is not
  // dropped. Every node's routes learn the placement from etcd, so allow them a moment.
  for (int from : {a, b}) {
    HttpResult echo;
    ASSERT_TRUE(WaitFor(
        [&] {
          echo = cluster_->NodeGateway(from, "POST", "/fn/echo", "via " + cluster_->node_name(from));
          return echo.status == 200;
        },
        10s))
        << echo.status << " " << echo.body;
    EXPECT_EQ(echo.body, "via " + cluster_->node_name(from));
  }
  // 8 MiB of patterned bytes, Content-Length and chunked, each way through the forward.
  std::string big(8u << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto large = cluster_->NodeGateway(a, "POST", "/fn/echo", big);
  ASSERT_EQ(large.status, 200) << large.body.substr(0, 200);
  EXPECT_EQ(large.body.size(), big.size());
  EXPECT_TRUE(large.body == big) << "the 8 MiB body came back changed";
  auto chunked = HttpAt(cluster_->node_ip(b), TestCluster::kGatewayPort, "POST", "/fn/echo",
                        big.substr(0, 300000), {}, 7000, 10000);
  ASSERT_EQ(chunked.status, 200) << chunked.body.substr(0, 200);
  EXPECT_TRUE(chunked.body == big.substr(0, 300000));
  // Two requests pipelined on one keep-alive connection: both answered, in order.
  const std::string two =
      "POST /fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
      "POST /fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecond";
  const std::string both = RawExchange(cluster_->node_ip(a), TestCluster::kGatewayPort, two, 2);
  const size_t first = both.find("\r\n\r\nfirst");
  const size_t second = both.find("\r\n\r\nsecond");
  EXPECT_NE(first, std::string::npos) << both;
  EXPECT_NE(second, std::string::npos) << both;
  EXPECT_LT(first, second);
  EXPECT_EQ(both.rfind("HTTP/1.1 200", 0), 0u) << both;

  // Counted on the forwarding node, per function and the node it went to.
  auto metrics = cluster_->NodeGateway(a, "GET", "/metrics");
  const std::string labels =
      "function=\"echo\",node=\"" + cluster_->node_name(home) + "\",result=\"ok\"";
  EXPECT_GE(Metric(metrics.body, "shoal_forwards_total", labels), 4.0) << metrics.body;
  // The serving node forwarded nothing.
  auto home_metrics = cluster_->NodeGateway(home, "GET", "/metrics");
  EXPECT_EQ(home_metrics.body.find("shoal_forwards_total{"), std::string::npos);

  // A request another node already forwarded is not forwarded again: 404 where it is not placed.
  auto looped = HttpAt(cluster_->node_ip(a), TestCluster::kGatewayPort, "POST", "/fn/echo", "x",
                       {"X-Shoal-Forwarded-By: " + cluster_->node_name(b)}, 0, 10000);
  EXPECT_EQ(looped.status, 404);
  EXPECT_NE(looped.body.find("function 'echo' not found"), std::string::npos) << looped.body;
  // A function no node runs is 404 on every node, as on one node.
  auto none = cluster_->NodeGateway(b, "POST", "/fn/nowhere", "x");
  EXPECT_EQ(none.status, 404);
  EXPECT_NE(none.body.find("function 'nowhere' not found"), std::string::npos) << none.body;

  // `shoal get nodes` against the controller: every node with its gateway address.
  const std::vector<std::string> env = {
      "SHOAL_SERVER=http://127.0.0.1:" + std::to_string(cluster_->controller_port(0)),
      "SHOAL_TOKEN=" + cluster_->controller_token()};
  auto table = RunCli({"get", "nodes"}, {}, env);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.rfind("NAME", 0), 0u) << table.out;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(table.out.find(cluster_->node_name(i)), std::string::npos) << table.out;
    EXPECT_NE(table.out.find(cluster_->node_ip(i) + ":8080"), std::string::npos) << table.out;
  }
  auto listed = RunCli({"get", "nodes", "-o", "json"}, {}, env);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out)["nodes"].size(), 3u);
  auto one = RunCli({"get", "nodes", cluster_->node_name(home), "-o", "yaml"}, {}, env);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("name: " + cluster_->node_name(home)), std::string::npos) << one.out;
  auto wide = RunCli({"get", "nodes", "-o", "wide"}, {}, env);
  EXPECT_NE(wide.out.find("COLD-START"), std::string::npos) << wide.out;
  // The functions, each with the nodes that run it.
  auto fns = RunCli({"get"}, {}, env);
  ASSERT_EQ(fns.exit_code, 0) << fns.err;
  EXPECT_NE(fns.out.find("NODES"), std::string::npos) << fns.out;
  EXPECT_NE(fns.out.find(cluster_->node_name(home)), std::string::npos) << fns.out;
  auto described = RunCli({"describe", "echo"}, {}, env);
  ASSERT_EQ(described.exit_code, 0) << described.err;
  EXPECT_NE(described.out.find("Placements:\n  " + cluster_->node_name(home) +
                               "   min 0, max 1 instance(s)"),
            std::string::npos)
      << described.out;
  auto missing = RunCli({"get", "nodes", "nope"}, {}, env);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("node 'nope' not found"), std::string::npos) << missing.err;

  // /readyz says how the node's etcd link stands.
  auto ready = cluster_->NodeGateway(a, "GET", "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_NE(ready.body.find("etcd: registered"), std::string::npos) << ready.body;
}

TEST_F(ClusterForwardTest, ALostNodesFunctionIsServedThroughEveryNodeOnceItMoved) {
  auto r = Deploy(
      "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
      "spec:\n  handler:\n    builtin: echo\n  scale: {min: 1, max: 1}\n");
  ASSERT_EQ(r.status, 201) << r.body;
  std::vector<std::string> placed;
  ASSERT_TRUE(WaitFor([&] { return (placed = PlacedOn("echo")).size() == 1; }, 10s));
  const int home = IndexOf(placed[0]);
  const int a = (home + 1) % 3, b = (home + 2) % 3;
  for (int from : {a, b}) {
    ASSERT_TRUE(WaitFor(
        [&] { return cluster_->NodeGateway(from, "POST", "/fn/echo", "before").body == "before"; },
        15s));
  }
  // Its node is killed: until its lease ends a forward there fails with a clear 502, never a
  // hang or a silent drop; then placement moves the function and every live node serves it.
  cluster_->StopNode(home, SIGKILL);
  auto during = cluster_->NodeGateway(a, "POST", "/fn/echo", "during");
  if (during.status != 200) {
    EXPECT_EQ(during.status, 502) << during.body;
    EXPECT_NE(during.body.find("'echo' runs on another node and could not be reached there"),
              std::string::npos)
        << during.body;
  }
  for (int from : {a, b}) {
    HttpResult echo;
    EXPECT_TRUE(WaitFor(
        [&] {
          echo = cluster_->NodeGateway(from, "POST", "/fn/echo", "after");
          return echo.status == 200 && echo.body == "after";
        },
        20s))
        << cluster_->node_name(from) << ": " << echo.status << " " << echo.body;
  }
  placed = PlacedOn("echo");
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_NE(placed[0], cluster_->node_name(home));
}

}  // namespace
}  // namespace shoal::testing
