// Runs the built `shoal` binary against a fake shoald: a thread with a listening socket that
// answers canned replies and records what it was asked.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/serving/onnx/onnx.h"
#include "tests/support/http_head.h"
#include "tests/support/run_process.h"
#include "tests/support/temp_dir.h"

namespace {

using nlohmann::json;

struct Request {
  std::string method, target, body;
  std::map<std::string, std::string> headers;  // lower-cased names
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::string> headers;
};

// A TCP socket bound to a free loopback port, and in `*port` that port; -1 if it could not bind.
int BindLoopback(uint16_t* port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

class FakeShoald {
 public:
  FakeShoald() {
    fd_ = BindLoopback(&port_);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeShoald() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }

  void On(const std::string& method_and_target, Reply reply) {
    std::lock_guard<std::mutex> lock(mu_);
    routes_[method_and_target] = std::move(reply);
  }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    while (!stop_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      Handle(c);
      close(c);
    }
  }

  void Handle(int c) {
    std::string data;
    char buf[65536];
    size_t head_end;
    while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = read(c, buf, sizeof buf);
      if (n <= 0) return;
      data.append(buf, static_cast<size_t>(n));
    }
    Request req;
    std::istringstream head(data.substr(0, head_end));
    std::string line;
    std::getline(head, line);
    std::istringstream first(line);
    first >> req.method >> req.target;
    req.headers = shoal::testing::HeadFields(head);
    const size_t want =
        req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    req.body = data.substr(head_end + 4);
    while (req.body.size() < want) {
      ssize_t n = read(c, buf, sizeof buf);
      if (n <= 0) break;
      req.body.append(buf, static_cast<size_t>(n));
    }
    Reply reply{404, "application/json", "{\"error\":\"no route\"}\n", {}};
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
      auto it = routes_.find(req.method + " " + req.target);
      if (it != routes_.end()) reply = it->second;
    }
    std::string out =
        "HTTP/1.1 " + std::to_string(reply.status) + " X\r\nContent-Type: " + reply.content_type +
        "\r\nContent-Length: " + std::to_string(reply.body.size()) + "\r\nConnection: close\r\n";
    for (const auto& h : reply.headers) out += h + "\r\n";
    out += "\r\n" + reply.body;
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = write(c, out.data() + done, out.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, Reply> routes_;
  std::vector<Request> requests_;
};

using shoal::testing::CliResult;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliResult RunShoal(const std::string& server, std::vector<std::string> args,
                   const std::string& stdin_data = "") {
  args.insert(args.begin(), {SHOAL_CLI_BIN, "--server", server, "--gateway", server});
  return shoal::testing::RunProcess(std::move(args), stdin_data);
}

// Runs `shoal` on a pseudo-terminal (80 columns) and returns what it drew (the terminal turns
// "\n" into "\r\n"); with `interrupt_after_ms`, sends it SIGINT then, as Ctrl-C would.
// `interrupt_when`: Ctrl-C (SIGINT) once what the terminal shows satisfies it (or, so that a CLI
// that never gets there fails instead of hanging, after 20 s).
CliResult RunShoalInPty(const std::string& server, std::vector<std::string> args,
                        const std::function<bool(const std::string&)>& interrupt_when = nullptr) {
  args.insert(args.begin(), {SHOAL_CLI_BIN, "--server", server, "--gateway", server});
  winsize ws{};
  ws.ws_col = 80;
  ws.ws_row = 24;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) {
    setenv("TERM", "xterm", 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  CliResult r;
  if (pid < 0) return r;
  const auto start = std::chrono::steady_clock::now();
  bool interrupted = false;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) {
      const ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the child closed the terminal
      r.out.append(buf, static_cast<size_t>(n));
    }
    if (interrupt_when && !interrupted &&
        (interrupt_when(r.out) ||
         std::chrono::steady_clock::now() - start > std::chrono::seconds(20))) {
      kill(pid, SIGINT);
      interrupted = true;
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

json FunctionJson(const std::string& name, int ready, int desired, double rps) {
  return json{
      {"id", 1},
      {"name", name},
      {"namespace", "default"},
      {"labels", {{"app", "demo"}}},
      {"handler", {{"builtin", "echo"}, {"env", json::object()}}},
      {"concurrency", 8},
      {"scale", {{"min", 1}, {"max", 4}}},
      {"timeout_s", 30.0},
      {"keep_alive_s", 60.0},
      {"max_body_bytes", 64 << 20},
      {"resources", {{"cpu", 0.5}, {"memory_bytes", 128 << 20}, {"gpu", 0}}},
      {"generation", 2},
      {"age_s", 330.0},
      {"manifest", "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name + "\n"},
      {"status",
       {{"desired", desired},
        {"ready", ready},
        {"starting", 0},
        {"inflight", 3},
        {"queued", 0},
        {"rps", rps},
        {"p50_ms", 0.8},
        {"p99_ms", 12.5},
        {"requests_total", 100},
        {"errors_total", 1},
        {"cold_starts", 2},
        {"last_cold_start_ms", 41.0}}}};
}

class CliTest : public ::testing::Test {
 protected:
  // The server answers `route` with 404 and `body`; `args` then exit 1, print "shoal: " and the
  // server's `error` on stderr and nothing on stdout.
  void ExpectNotFound(const std::string& route, const std::string& body,
                      const std::vector<std::string>& args, const std::string& error) {
    server_.On(route, {404, "application/json", body, {}});
    auto r = RunShoal(server_.url(), args);
    EXPECT_EQ(r.exit_code, 1) << route;
    EXPECT_EQ(r.err, "shoal: " + error + "\n");
    EXPECT_EQ(r.out, "") << route;
  }

  FakeShoald server_;
};

TEST_F(CliTest, GetPrintsATable) {
  server_.On(
      "GET /v1/functions",
      {200,
       "application/json",
       json{{"functions", {FunctionJson("echo", 1, 2, 12.34), FunctionJson("sha256", 0, 0, 0)}}}
           .dump(),
       {}});
  auto r = RunShoal(server_.url(), {"get"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "NAME     READY   INFLIGHT   RPS    AGE\n"
            "echo     1/2     3          12.3   5m\n"
            "sha256   0/0     3          0.0    5m\n");
  auto wide = RunShoal(server_.url(), {"get", "-o", "wide"});
  EXPECT_EQ(wide.exit_code, 0);
  EXPECT_NE(wide.out.find("HANDLER        CONCURRENCY   SCALE   TIMEOUT"), std::string::npos)
      << wide.out;
  EXPECT_NE(wide.out.find("builtin:echo   8             1..4    30s"), std::string::npos)
      << wide.out;
  auto yaml = RunShoal(server_.url(), {"get", "-o", "yaml"});
  EXPECT_EQ(yaml.out,
            "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n---\n"
            "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: sha256\n");
  auto js = RunShoal(server_.url(), {"get", "-o", "json"});
  EXPECT_EQ(json::parse(js.out)["functions"][1]["name"], "sha256");
  auto bad = RunShoal(server_.url(), {"get", "-o", "xml"});
  EXPECT_NE(bad.exit_code, 0);
}

TEST_F(CliTest, GetOneAndUnknown) {
  server_.On("GET /v1/functions/echo",
             {200, "application/json", FunctionJson("echo", 2, 2, 1).dump(), {}});
  auto r = RunShoal(server_.url(), {"get", "echo"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "NAME   READY   INFLIGHT   RPS   AGE\necho   2/2     3          1.0   5m\n");
  ExpectNotFound("GET /v1/functions/nope", "{\"error\":\"function 'nope' not found\"}\n",
                 {"get", "nope"}, "function 'nope' not found");
}

TEST_F(CliTest, DeploySendsTheManifestAndReportsEachFunction) {
  json answer{{"functions",
               {{{"name", "echo"}, {"action", "created"}},
                {{"name", "sha256"}, {"action", "configured"}}}}};
  server_.On("POST /v1/functions", {201, "application/json", answer.dump(), {}});
  const std::string manifest = "apiVersion: shoal.dev/v1\nkind: Function\n";
  auto r = RunShoal(server_.url(), {"deploy", "-f", "-"}, manifest);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "function/echo created\nfunction/sha256 configured\n");
  auto reqs = server_.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body, manifest);
  // From a file too.
  char path[] = "/tmp/shoal-cli-test-manifest-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_EQ(write(fd, manifest.data(), manifest.size()), static_cast<ssize_t>(manifest.size()));
  close(fd);
  auto f = RunShoal(server_.url(), {"deploy", "-f", path});
  unlink(path);
  EXPECT_EQ(f.exit_code, 0);
  EXPECT_EQ(server_.requests().back().body, manifest);
  auto missing = RunShoal(server_.url(), {"deploy", "-f", "/nonexistent.yaml"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "shoal: cannot read /nonexistent.yaml\n");
}

// Several manifests: each file is its own request, in order (a directory's *.yaml, *.yml and
// *.json by name); plain output reports each and the count, a terminal also shows n/N.
TEST_F(CliTest, DeployManyManifestsOneRequestEach) {
  json answer{{"functions", {{{"name", "echo"}, {"action", "configured"}}}}};
  server_.On("POST /v1/functions", {200, "application/json", answer.dump(), {}});
  const std::string dir = ::testing::TempDir() + "shoal-cli-deploy-dir";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/sub");
  for (const char* f : {"b.yml", "a.yaml", "c.json", "notes.txt", "sub/d.yaml"}) {
    std::ofstream(dir + "/" + f) << "doc " << f << "\n";
  }
  const std::string extra = dir + "/sub/d.yaml";
  auto r = RunShoal(server_.url(), {"deploy", "-f", dir, "-f", extra});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "function/echo configured\nfunction/echo configured\nfunction/echo configured\n"
            "function/echo configured\n4 manifests applied\n");
  std::vector<std::string> bodies;
  for (const auto& q : server_.requests()) bodies.push_back(q.body);
  EXPECT_EQ(bodies, (std::vector<std::string>{"doc a.yaml\n", "doc b.yml\n", "doc c.json\n",
                                              "doc sub/d.yaml\n"}));

  auto tty = RunShoalInPty(server_.url(), {"deploy", "-f", dir});
  EXPECT_EQ(tty.exit_code, 0) << tty.out;
  EXPECT_NE(tty.out.find("\r[######--------------] 2/3 " + dir + "/b.yml\x1b[K"), std::string::npos)
      << tty.out;
  EXPECT_NE(tty.out.find("\r\x1b[Kfunction/echo configured\r\n"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("3 manifests applied\r\n"), std::string::npos) << tty.out;

  auto stopped = RunShoal(server_.url(), {"deploy", "-f", extra, "-f", "/nonexistent.yaml"});
  EXPECT_EQ(stopped.exit_code, 1);
  EXPECT_EQ(stopped.out, "function/echo configured\n");
  EXPECT_EQ(stopped.err,
            "shoal: /nonexistent.yaml: cannot read /nonexistent.yaml\n"
            "shoal: 1 of 2 manifests applied before it\n");
  std::filesystem::create_directories(dir + "/empty");
  auto empty = RunShoal(server_.url(), {"deploy", "-f", dir + "/empty"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_EQ(empty.err, "shoal: no manifests (*.yaml, *.yml, *.json) in " + dir + "/empty\n");
  std::filesystem::remove_all(dir);
}

TEST_F(CliTest, BadManifestPrintsTheServersMessageAndExits1) {
  server_.On("POST /v1/functions",
             {400,
              "application/json",
              "{\"error\":\"spec.scale.max: must be >= spec.scale.min (2 > 1) (line 12)\"}\n",
              {}});
  auto r = RunShoal(server_.url(), {"deploy", "-f", "-"}, "whatever");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "shoal: spec.scale.max: must be >= spec.scale.min (2 > 1) (line 12)\n");
  EXPECT_EQ(r.out, "");
}

// Each of `commands`, run against a loopback port that was just free (nothing listens on it)
// with `stdin_data`, exits 2 saying shoald cannot be reached there.
void ExpectUnreachable(const std::vector<std::vector<std::string>>& commands,
                       const std::string& stdin_data) {
  uint16_t port = 0;
  const int fd = BindLoopback(&port);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  for (const auto& args : commands) {
    auto r = RunShoal(url, args, stdin_data);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << (args.size() > 1 ? args[1] : "");
    EXPECT_EQ(r.err.rfind("shoal: cannot reach shoald at " + url + ": ", 0), 0u) << r.err;
  }
}

TEST(CliUnreachableTest, ConnectionRefusedExits2) {
  ExpectUnreachable({{"get"}, {"top"}, {"invoke", "echo", "-d", "x"}, {"deploy", "-f", "-"}}, "x");
}

TEST_F(CliTest, InvokeWritesTheRawBodyAndReportsErrors) {
  server_.On("POST /fn/echo/sub?x=1",
             {200, "application/octet-stream", std::string("a\0b", 3), {}});
  server_.On("GET /fn/echo", {200, "text/plain", "got\n", {}});
  server_.On("POST /fn/nope",
             {404, "application/json", "{\"error\":\"function 'nope' not found\"}\n", {}});
  auto r = RunShoal(server_.url(), {"invoke", "echo", "-d", "hello", "--path", "/sub?x=1", "-H",
                                    "X-One: 1", "-H", "X-Two: 2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("a\0b", 3));
  auto req = server_.requests().back();
  EXPECT_EQ(req.body, "hello");
  EXPECT_EQ(req.headers["x-one"], "1");
  EXPECT_EQ(req.headers["x-two"], "2");
  EXPECT_EQ(req.headers["content-type"], "application/octet-stream");

  auto g = RunShoal(server_.url(), {"invoke", "echo"});
  EXPECT_EQ(g.exit_code, 0);
  EXPECT_EQ(g.out, "got\n");
  EXPECT_EQ(server_.requests().back().method, "GET");

  // -d @FILE streams the file.
  char path[] = "/tmp/shoal-cli-test-body-XXXXXX";
  int fd = mkstemp(path);
  const std::string big(300000, 'q');
  ASSERT_EQ(write(fd, big.data(), big.size()), static_cast<ssize_t>(big.size()));
  close(fd);
  auto f = RunShoal(server_.url(),
                    {"invoke", "echo", "-d", std::string("@") + path, "--path", "sub?x=1"});
  unlink(path);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(server_.requests().back().body.size(), big.size());
  EXPECT_TRUE(server_.requests().back().body == big);

  auto e = RunShoal(server_.url(), {"invoke", "nope", "-d", "x"});
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(e.out, "");
  EXPECT_EQ(e.err, "HTTP 404: function 'nope' not found\n");
}

TEST_F(CliTest, TopPrintsTheDataPlaneAndATable) {
  json top{{"dataplane", "sockmap"},
           {"functions",
            {{{"name", "echo"},
              {"policy", "kpa"},
              {"desired", 3},
              {"ready", 2},
              {"starting", 1},
              {"inflight", 5},
              {"queued", 1},
              {"rps", 250.0},
              {"p50_ms", 0.42},
              {"p99_ms", 12.5},
              {"cold_starts", 1},
              {"last_cold_start_ms", 35.0},
              {"cold_starts_avoided", 4}}}}};
  server_.On("GET /v1/top", {200, "application/json", top.dump(), {}});
  auto r = RunShoal(server_.url(), {"top"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Data plane: sockmap\n"
            "FUNCTION   POLICY   DESIRED   ACTUAL   INFLIGHT   QUEUED   REQ/S   P50      P99      "
            "COLD-STARTS       AVOIDED   ANOMALIES\n"
            "echo       kpa      3         2+1      5          1        250.0   0.42ms   12.5ms   "
            "1 (last 35.0ms)   4         0\n");
}

// top -w on a terminal: every refresh from the top-left corner, each line cleared to its end
// and the rest of the screen below, never a full clear or a scroll; Ctrl-C shows the cursor
// again. Elsewhere: one table after another; -o json: one object a line.
TEST_F(CliTest, TopWatchRefreshesInPlace) {
  json top{{"dataplane", "sockmap"}, {"functions", json::array()}};
  server_.On("GET /v1/top", {200, "application/json", top.dump(), {}});
  // Ctrl-C once two refreshes are on the screen.
  auto r =
      RunShoalInPty(server_.url(), {"top", "-w", "--interval", "0.05"}, [](const std::string& out) {
        const size_t first = out.find("\x1b[J");
        return first != std::string::npos && out.find("\x1b[J", first + 1) != std::string::npos;
      });
  EXPECT_EQ(r.exit_code, 128 + SIGINT);
  const std::string frame =
      "\x1b[HData plane: sockmap\x1b[K\r\n"
      "FUNCTION   POLICY   DESIRED   ACTUAL   INFLIGHT   QUEUED   REQ/S   P50   P99   "
      "COLD-STARTS   AVOIDED   ANOMALIES\x1b[K\r\n(no functions deployed)\x1b[K\r\n\x1b[J";
  EXPECT_EQ(r.out.rfind("\x1b[?25l" + frame + frame, 0), 0u) << r.out;
  EXPECT_EQ(r.out.find("\x1b[2J"), std::string::npos);
  EXPECT_EQ(r.out.substr(r.out.size() - 6), "\x1b[?25h");

  auto j = RunShoal(server_.url(), {"top", "-o", "json"});
  EXPECT_EQ(j.exit_code, 0);
  EXPECT_EQ(j.out, top.dump() + "\n");
}

TEST_F(CliTest, DescribeShowsInstances) {
  json f = FunctionJson("echo", 1, 1, 2);
  f["status"]["instances"] = {{{"id", 0x10001},
                               {"pid", 4242},
                               {"state", "ready"},
                               {"inflight", 3},
                               {"served", 97},
                               {"age_s", 61.0},
                               {"cold_start_ms", 1.5},
                               {"start_path", "zygote"},
                               {"start_note", ""},
                               {"restarts", 0}},
                              {{"id", 0x20002},
                               {"pid", 4243},
                               {"state", "ready"},
                               {"inflight", 0},
                               {"served", 1},
                               {"age_s", 2.0},
                               {"cold_start_ms", 41.0},
                               {"start_path", "spawn"},
                               {"start_note", "zygote still loading after 2000 ms"},
                               {"restarts", 0}}};
  f["autoscaling"] = {{"policy", "kpa"},
                      {"target", 10.0},
                      {"keep_alive", "histogram"},
                      {"params", {{"stableWindow", 6.0}}}};
  f["status"]["desired"] = 3;
  f["status"]["actual"] = 2;
  f["status"]["decision"] = {
      {"replicas", 3}, {"prewarm", 0}, {"keep_alive_s", 60.0}, {"concurrency_target", 10.0},
      {"panic", true}, {"age_s", 1.0}, {"reason", "desired 3"}};
  server_.On("GET /v1/functions/echo", {200, "application/json", f.dump(), {}});
  auto r = RunShoal(server_.url(), {"describe", "echo"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Autoscaling:   kpa, target 10.0, keep-alive histogram (stableWindow=6)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  Autoscaler:  desired 3, actual 2 (replicas 3 + pre-warm 0), keep-alive "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(", panic\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Name:          echo\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Handler:       builtin:echo\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Scale:         1..4\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Max body:      64Mi\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Resources:     cpu 0.5, memory 128Mi, gpu 0\n"), std::string::npos)
      << r.out;
  EXPECT_NE(
      r.out.find("  ID        PID    STATE   INFLIGHT   SERVED   AGE   COLD-START   START    "
                 "RESTARTS\n"
                 "  0x10001   4242   ready   3          97       61s   1.50ms       zygote   0\n"
                 "  0x20002   4243   ready   0          1        2s    41.0ms       spawn    0\n"
                 "  0x20002 spawned: zygote still loading after 2000 ms\n"),
      std::string::npos)
      << r.out;
}

TEST_F(CliTest, DeleteAndLogs) {
  server_.On("DELETE /v1/functions/echo", {200, "application/json", "{\"deleted\":\"echo\"}", {}});
  auto d = RunShoal(server_.url(), {"delete", "echo"});
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_EQ(d.out, "function/echo deleted\n");
  ExpectNotFound("DELETE /v1/functions/nope", "{\"error\":\"function 'nope' not found\"}",
                 {"delete", "nope"}, "function 'nope' not found");

  server_.On("GET /v1/functions/echo/logs?offset=0",
             {200, "text/plain", "[1] hello\n", {"X-Shoal-Next-Offset: 10"}});
  server_.On("GET /v1/functions/echo/logs?offset=10",
             {200, "text/plain", "", {"X-Shoal-Next-Offset: 10"}});
  auto l = RunShoal(server_.url(), {"logs", "echo"});
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(l.out, "[1] hello\n");
  auto reqs = server_.requests();
  EXPECT_EQ(reqs.back().target, "/v1/functions/echo/logs?offset=10");
}

json JobStatus(const std::string& state, json versions) {
  return json{{"name", "fmnist"},
              {"algorithm", "fedcompass"},
              {"state", state},
              {"version", versions.empty() ? 0 : versions.back()["version"].get<int>()},
              {"round", 7},
              {"clients", {{"expected", 16}, {"joined", 12}}},
              {"updates_total", 190},
              {"elapsed_s", 83.44},
              {"target_accuracy", 0.85},
              {"best_accuracy", 0.8123},
              {"versions", std::move(versions)}};
}

json Version(int version, json accuracy, json loss, int updates, double elapsed) {
  return json{{"version", version},
              {"accuracy", std::move(accuracy)},
              {"loss", std::move(loss)},
              {"updates", updates},
              {"elapsed_s", elapsed}};
}

TEST_F(CliTest, DeployReportsFlJobs) {
  json answer{{"functions", {{{"name", "echo"}, {"action", "configured"}}}},
              {"jobs", {{{"kind", "FLJob"}, {"name", "fmnist"}, {"action", "created"}}}}};
  server_.On("POST /v1/functions", {201, "application/json", answer.dump(), {}});
  auto r = RunShoal(server_.url(), {"deploy", "-f", "-"}, "kind: FLJob\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "function/echo configured\nfljob/fmnist created\n");
  EXPECT_EQ(server_.requests().back().body, "kind: FLJob\n");
  server_.On("POST /v1/functions",
             {501, "application/json", R"({"error":"FL jobs are not enabled on this node"})", {}});
  auto off = RunShoal(server_.url(), {"deploy", "-f", "-"}, "kind: FLJob\n");
  EXPECT_EQ(off.exit_code, 1);
  EXPECT_EQ(off.err, "shoal: FL jobs are not enabled on this node\n");
}

TEST_F(CliTest, FlStatusPrintsTheJobAndAVersionTable) {
  server_.On("GET /v1/jobs/fmnist", {200,
                                     "application/json",
                                     JobStatus("running", {Version(2, 0.7512, 0.66, 16, 9.0),
                                                           Version(1, 0.61234, 1.0249, 16, 4.25),
                                                           Version(3, nullptr, nullptr, 4, 12.5)})
                                         .dump(),
                                     {}});
  auto r = RunShoal(server_.url(), {"fl", "status", "fmnist"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Name:          fmnist\n"
            "Algorithm:     fedcompass\n"
            "State:         running\n"
            "Version:       3 (round 7)\n"
            "Clients:       12/16 joined\n"
            "Updates:       190\n"
            "Elapsed:       83.4s\n"
            "Accuracy:      best 0.8123, target 0.8500\n"
            "Versions:\n"
            "  VERSION   ACCURACY   LOSS     UPDATES   TIME\n"
            "  1         0.6123     1.0249   16        4.2s\n"
            "  2         0.7512     0.6600   16        9.0s\n"
            "  3         -          -        4         12.5s\n");
  server_.On("GET /v1/jobs/empty",
             {200, "application/json", JobStatus("running", json::array()).dump(), {}});
  auto e = RunShoal(server_.url(), {"fl", "status", "empty"});
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_NE(e.out.find("Version:       0 (round 7)\n"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("Versions:\n  <none>\n"), std::string::npos) << e.out;
  ExpectNotFound("GET /v1/jobs/nope", R"({"error":"job 'nope' not found"})",
                 {"fl", "status", "nope"}, "job 'nope' not found");
}

TEST_F(CliTest, FlWatchPrintsAPlainLinePerChangeUntilDone) {
  // First polls: version 1 evaluated, version 2 not yet.
  server_.On(
      "GET /v1/jobs/fmnist",
      {200,
       "application/json",
       JobStatus("running", {Version(1, 0.6, 1.1, 16, 4.0), Version(2, nullptr, nullptr, 16, 8.0)})
           .dump(),
       {}});
  auto polls = [&](const std::string& target) {
    size_t n = 0;
    for (const auto& q : server_.requests()) n += q.target == target;
    return n;
  };
  CliResult r;
  std::thread cli([&] {
    r = RunShoal(server_.url(), {"fl", "watch", "fmnist", "--interval", "0.05"});
  });
  for (int i = 0; i < 500 && polls("/v1/jobs/fmnist") < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Then the job finishes: version 2 got its evaluation.
  server_.On("GET /v1/jobs/fmnist",
             {200,
              "application/json",
              JobStatus("done", {Version(1, 0.6, 1.1, 16, 4.0), Version(2, 0.7, 0.9, 16, 8.0),
                                 Version(3, nullptr, nullptr, 16, 12.0)})
                  .dump(),
              {}});
  cli.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // One line per change (three polls of the same status printed one), no escapes; the best
  // accuracy is the server's (0.8123 of 0.85: 95%).
  EXPECT_EQ(r.out,
            "fljob/fmnist  running  version 2   95% to accuracy 0.8500  accuracy 0.6000 (v1)  "
            "loss 1.1000  0.0 commits/min  ETA -\n"
            "fljob/fmnist  done  version 3  100% to accuracy 0.8500  accuracy 0.7000 (v2)  "
            "loss 0.9000  0.0 commits/min  ETA 0s\n"
            "fljob/fmnist done: version 3, best accuracy 0.8123 (target 0.8500), 83.4s\n");
  EXPECT_GE(polls("/v1/jobs/fmnist"), 4u);

  // -o json: one object per change, the last one done.
  auto j = RunShoal(server_.url(), {"fl", "watch", "fmnist", "-o", "json"});
  EXPECT_EQ(j.exit_code, 0) << j.err;
  const json last = json::parse(j.out);
  EXPECT_EQ(last["state"], "done");
  EXPECT_EQ(last["progress"], 1.0);
  EXPECT_EQ(last["version"], 3);
  EXPECT_EQ(last["accuracy"], 0.7);
  EXPECT_EQ(last["evaluated_version"], 2);

  // A job deleted while watched ends the watch with exit 1 after what was printed.
  server_.On("GET /v1/jobs/gone",
             {200,
              "application/json",
              JobStatus("running", {Version(1, nullptr, nullptr, 1, 1.0)}).dump(),
              {}});
  std::thread del([&] {
    r = RunShoal(server_.url(), {"fl", "watch", "gone", "--interval", "0.05"});
  });
  for (int i = 0; i < 500 && polls("/v1/jobs/gone") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server_.On("GET /v1/jobs/gone",
             {404, "application/json", R"({"error":"job 'gone' not found"})", {}});
  del.join();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;  // its one line
  EXPECT_EQ(r.err, "shoal: fljob/gone was deleted while it was watched\n");
  // Unknown from the start: the server's message.
  ExpectNotFound("GET /v1/jobs/missing", R"({"error":"job 'missing' not found"})",
                 {"fl", "watch", "missing"}, "job 'missing' not found");
  // A job in a failed state.
  json failed = JobStatus("failed", json::array());
  failed["error"] = "leaf function crashed";
  server_.On("GET /v1/jobs/broken", {200, "application/json", failed.dump(), {}});
  auto b = RunShoal(server_.url(), {"fl", "watch", "broken"});
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_EQ(b.err, "shoal: fljob/broken failed (state 'failed'): leaf function crashed\n");
}

// A terminal: the block is redrawn in place (cursor up, lines cleared), the cursor hidden while
// it runs and shown again at the end, also when Ctrl-C stops it.
TEST_F(CliTest, FlWatchRedrawsInPlaceOnATerminal) {
  server_.On(
      "GET /v1/jobs/fmnist",
      {200, "application/json", JobStatus("running", {Version(1, 0.6, 1.1, 16, 80.0)}).dump(), {}});
  // Ctrl-C once the block has been redrawn.
  auto r = RunShoalInPty(server_.url(), {"fl", "watch", "fmnist", "--interval", "0.05"},
                         [](const std::string& out) {
                           return out.find("\r\x1b[3Afljob/fmnist") != std::string::npos;
                         });
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.out;
  EXPECT_EQ(r.out.rfind("\x1b[?25lfljob/fmnist  fedcompass  running  version 1  clients 12/16"
                        "\x1b[K\r\n[",
                        0),
            0u)
      << r.out;
  EXPECT_NE(r.out.find("   95%  to accuracy 0.8500\x1b[K\r\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\r\x1b[3Afljob/fmnist"), std::string::npos) << r.out;  // redrawn
  EXPECT_EQ(r.out.substr(r.out.size() - 6), "\x1b[?25h") << r.out;             // the cursor is back

  server_.On(
      "GET /v1/jobs/fmnist",
      {200, "application/json", JobStatus("done", {Version(1, 0.6, 1.1, 16, 80.0)}).dump(), {}});
  auto d = RunShoalInPty(server_.url(), {"fl", "watch", "fmnist"});
  EXPECT_EQ(d.exit_code, 0) << d.out;
  EXPECT_NE(d.out.find("100%  to accuracy 0.8500"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("\r\nfljob/fmnist done: version 1, best accuracy 0.8123"), std::string::npos)
      << d.out;
  EXPECT_EQ(d.out.substr(d.out.size() - 6), "\x1b[?25h") << d.out;
}

TEST_F(CliTest, FlModelWritesTheBytes) {
  std::string bytes(70000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31 + 7);
  server_.On("GET /v1/jobs/fmnist/model",
             {200, "application/octet-stream", bytes, {"X-Shoal-Model-Version: 12"}});
  server_.On("GET /v1/jobs/fmnist/model?version=4",
             {200, "application/octet-stream", "four", {"X-Shoal-Model-Version: 4"}});
  server_.On("GET /v1/jobs/fmnist/model?version=99",
             {404, "application/json", R"({"error":"version 99 is not kept"})", {}});
  const shoal::testing::TempDir dir("shoal-cli-test-model");
  const std::string path = dir / "model.safetensors";
  auto r = RunShoal(server_.url(), {"fl", "model", "fmnist", "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + path + " (version 12, 70000 bytes)\n");
  EXPECT_TRUE(Slurp(path) == bytes);
  auto v = RunShoal(server_.url(), {"fl", "model", "fmnist", "-o", path, "--version", "4"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, "wrote " + path + " (version 4, 4 bytes)\n");
  EXPECT_EQ(Slurp(path), "four");
  auto gone = RunShoal(server_.url(), {"fl", "model", "fmnist", "-o", path, "--version", "99"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_EQ(gone.err, "shoal: version 99 is not kept\n");
  EXPECT_EQ(Slurp(path), "four");  // an error writes nothing
  auto bad = RunShoal(server_.url(), {"fl", "model", "fmnist", "-o", dir / "no/x"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err, "shoal: cannot write " + (dir / "no/x") + "\n");
  auto noout = RunShoal(server_.url(), {"fl", "model", "fmnist"});
  EXPECT_NE(noout.exit_code, 0);
}

// On a terminal the download shows bytes of the total with a bar, then the final line takes
// its place; the bytes written are the same.
TEST_F(CliTest, FlModelShowsDownloadProgressOnATerminal) {
  std::string bytes(8 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 13 + 1);
  server_.On("GET /v1/jobs/fmnist/model",
             {200, "application/octet-stream", bytes, {"X-Shoal-Model-Version: 12"}});
  const std::string path = ::testing::TempDir() + "shoal-cli-progress.safetensors";
  auto r = RunShoalInPty(server_.url(), {"fl", "model", "fmnist", "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\rdownloading fmnist ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/8.0Mi\x1b[K"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\r\x1b[Kwrote " + path + " (version 12, 8388608 bytes)\r\n"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(Slurp(path) == bytes);
  std::remove(path.c_str());
}

TEST_F(CliTest, FlModelAsOnnxIsTheArchitectureWithTheVersionsWeights) {
  // The job's model download answers with `model`'s safetensors as version `version`.
  auto serve_model = [this](const shoal::model::Model& model, int version) {
    const std::vector<std::byte> st = shoal::model::ModelToSafetensors(model);
    server_.On("GET /v1/jobs/fmnist/model",
               {200,
                "application/octet-stream",
                std::string(reinterpret_cast<const char*>(st.data()), st.size()),
                {"X-Shoal-Model-Version: " + std::to_string(version)}});
  };
  const shoal::model::Model m = shoal::model::InitModel(shoal::model::MlpSpec(784, {16}, 10), 5);
  serve_model(m, 3);
  json status = JobStatus("running", json::array());
  status["model"] = {{"architecture", "mlp"}, {"hidden", 16}, {"params", 12730}};
  server_.On("GET /v1/jobs/fmnist", {200, "application/json", status.dump(), {}});
  const shoal::testing::TempDir dir("shoal-cli-test-onnx");
  const std::string path = dir / "model.onnx";
  auto r = RunShoal(server_.url(), {"fl", "model", "fmnist", "--format", "onnx", "-o", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("wrote " + path + " (version 3, ONNX opset 13, ", 0), 0u) << r.out;
  auto g = shoal::inference::LoadOnnx(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (size_t i = 0; i < m.spec.size(); ++i) {
    const auto t = m.tensor(i);
    EXPECT_EQ(g->initializers.at(m.spec.tensor(i).name).floats,
              std::vector<float>(t.begin(), t.end()))
        << m.spec.tensor(i).name;
  }
  // A shoald that does not name the architecture: a clear error, nothing written.
  unlink(path.c_str());
  server_.On("GET /v1/jobs/fmnist",
             {200, "application/json", JobStatus("running", json::array()).dump(), {}});
  auto old = RunShoal(server_.url(), {"fl", "model", "fmnist", "--format", "onnx", "-o", path});
  EXPECT_EQ(old.exit_code, 1);
  EXPECT_NE(old.err.find("job fmnist: its status names no model architecture"), std::string::npos)
      << old.err;
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  // Weights of another size than the architecture's: named.
  status["model"]["hidden"] = 32;
  server_.On("GET /v1/jobs/fmnist", {200, "application/json", status.dump(), {}});
  auto wrong = RunShoal(server_.url(), {"fl", "model", "fmnist", "--format", "onnx", "-o", path});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("does not fit architecture 'mlp'"), std::string::npos) << wrong.err;
  // A job on sklearn's digits (8x8 inputs): the status's input width shapes the graph.
  const shoal::model::Model digits =
      shoal::model::InitModel(shoal::model::MlpSpec(64, {32}, 10), 5);
  serve_model(digits, 4);
  status["model"]["inputs"] = 64;
  status["model"]["classes"] = 10;
  server_.On("GET /v1/jobs/fmnist", {200, "application/json", status.dump(), {}});
  auto small = RunShoal(server_.url(), {"fl", "model", "fmnist", "--format", "onnx", "-o", path});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  auto sg = shoal::inference::LoadOnnx(path);
  ASSERT_TRUE(sg.ok()) << sg.status().ToString();
  EXPECT_EQ(sg->initializers.at("fc1.weight").floats.size(), 32u * 64u);
}

TEST_F(CliTest, FlListAndDelete) {
  json second = JobStatus("done", json::array());
  second["name"] = "digits";
  second["algorithm"] = "fedavg";
  second["best_accuracy"] = nullptr;
  server_.On(
      "GET /v1/jobs",
      {200,
       "application/json",
       json{{"jobs", {JobStatus("running", {Version(5, 0.8, 0.5, 16, 40.0)}), second}}}.dump(),
       {}});
  auto r = RunShoal(server_.url(), {"fl", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "NAME     ALGORITHM    STATE     VERSION   CLIENTS   BEST-ACCURACY   ELAPSED\n"
            "fmnist   fedcompass   running   5         12/16     0.8123          83.4s\n"
            "digits   fedavg       done      0         12/16     -               83.4s\n");
  server_.On("GET /v1/jobs", {200, "application/json", R"({"jobs":[]})", {}});
  auto none = RunShoal(server_.url(), {"fl", "list"});
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_EQ(none.out, "");
  EXPECT_EQ(none.err, "No FL jobs deployed.\n");
  server_.On("GET /v1/jobs",
             {501, "application/json", R"({"error":"FL jobs are not enabled on this node"})", {}});
  auto off = RunShoal(server_.url(), {"fl", "list"});
  EXPECT_EQ(off.exit_code, 1);
  EXPECT_EQ(off.err, "shoal: FL jobs are not enabled on this node\n");

  server_.On("DELETE /v1/jobs/fmnist", {200, "application/json", R"({"deleted":"fmnist"})", {}});
  auto d = RunShoal(server_.url(), {"fl", "delete", "fmnist"});
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_EQ(d.out, "fljob/fmnist deleted\n");
  auto n = RunShoal(server_.url(), {"fl", "delete", "nope"});
  EXPECT_EQ(n.exit_code, 1);
  EXPECT_EQ(n.err, "shoal: no route\n");
}

TEST(CliFlUnreachableTest, ConnectionRefusedExits2) {
  ExpectUnreachable({{"fl", "status", "x"},
                     {"fl", "watch", "x"},
                     {"fl", "list"},
                     {"fl", "model", "x", "-o", "/tmp/shoal-cli-test-unreachable"}},
                    "");
}

}  // namespace

namespace shoal::cli {
namespace {

TEST(CliSimTest, TrainWritesTheLearnedPolicyWithAProgressBar) {
  const std::string out = ::testing::TempDir() + "learned-cli.json";
  auto r =
      RunShoal("http://127.0.0.1:1", {"sim", "train", "--out", out, "--seeds", "1", "--families",
                                      "timer,poisson", "--duration-scale", "0.1", "--no-eval"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("] 2/2 train poisson seed 1000"), std::string::npos) << r.err;
  // Then the sizing table: each run once per sizing action (2 families x 1 seed x 12).
  EXPECT_NE(r.err.find("] 24/24 train sizing poisson seed 1000 x1.30-hold-60s"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("trained on 2 runs (timer, poisson (seeds 1000..1000"), std::string::npos)
      << r.out;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("{\n  \"format\": \"shoal-learned-policy\",\n  \"version\": 2,", 0),
            0u)
      << text.str().substr(0, 200);
  auto bad = RunShoal("http://127.0.0.1:1", {"sim", "train", "--families", "nope", "--no-eval"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("workload family 'nope' unknown"), std::string::npos) << bad.err;
  std::remove(out.c_str());
}

TEST(CliSimTest, RunsThePolicyAndTheKpaBaselineOnTheSameArrivals) {
  // `shoal sim` runs locally: the server URL is never contacted.
  auto r = RunShoal("http://127.0.0.1:1",
                    {"sim", "--policy", "shoal", "--workload", "fl", "--duration-scale", "0.1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("workload  policy   requests", 0), 0u) << r.out;
  // FL rounds scaled to 4 rounds of 32 updates: both rows see the same 128 requests.
  EXPECT_NE(r.out.find("\nfl        kpa           128 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nfl        shoal         128 "), std::string::npos) << r.out;
  // The three ratios against KPA and their combined score, none picked alone.
  EXPECT_NE(r.out.find("\nshoal / kpa, geometric mean over 1 workload(s): cold-start requests "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("combined score (cold * inst-s * p99)^(-1/3) = "), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("[2/2] simulating fl under shoal"), std::string::npos) << r.err;
  auto bad = RunShoal("http://127.0.0.1:1", {"sim", "--workload", "nope"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("workload 'nope' unknown"), std::string::npos) << bad.err;
  auto badp = RunShoal("http://127.0.0.1:1", {"sim", "--policy", "magic"});
  EXPECT_EQ(badp.exit_code, 1);
  EXPECT_NE(badp.err.find("magic"), std::string::npos) << badp.err;
}

}  // namespace
}  // namespace shoal::cli
