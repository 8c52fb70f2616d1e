#include "shoald_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "http_head.h"
#include "hugepages_for_test.h"
#include "shoal/common/file_io.h"
#include "tests/support/temp_dir.h"

namespace shoal::testing {

std::string BinDir() { return SHOAL_BIN_DIR; }
std::string LibDir() { return SHOAL_LIB_DIR; }
bool IsRoot() { return geteuid() == 0; }

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

namespace {

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string ReadFile(const std::string& path) { return ReadFileBytes(path).value_or(""); }

}  // namespace

HttpResult Http(uint16_t port, const std::string& method, const std::string& path,
                const std::string& body, const std::vector<std::string>& headers, size_t chunk_size,
                int timeout_ms) {
  return HttpAt("127.0.0.1", port, method, path, body, headers, chunk_size, timeout_ms);
}

HttpResult HttpAt(const std::string& ipv4, uint16_t port, const std::string& method,
                  const std::string& path, const std::string& body,
                  const std::vector<std::string>& headers, size_t chunk_size, int timeout_ms) {
  HttpResult r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) {
    r.error = "not an IPv4 address: " + ipv4;
    close(fd);
    return r;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    r.error = std::string("connect: ") + strerror(errno);
    close(fd);
    return r;
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (chunk_size > 0) {
    req += "Transfer-Encoding: chunked\r\n\r\n";
  } else {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  }
  // Writer thread: the server may answer (413, 503) before reading the whole body.
  std::thread writer([&, fd] {
    if (!SendAll(fd, req.data(), req.size())) return;
    if (chunk_size == 0) {
      SendAll(fd, body.data(), body.size());
      return;
    }
    for (size_t off = 0; off < body.size(); off += chunk_size) {
      const size_t n = std::min(chunk_size, body.size() - off);
      char head[32];
      std::snprintf(head, sizeof head, "%zx\r\n", n);
      if (!SendAll(fd, head, strlen(head)) || !SendAll(fd, body.data() + off, n) ||
          !SendAll(fd, "\r\n", 2)) {
        return;
      }
    }
    SendAll(fd, "0\r\n\r\n", 5);
  });
  std::string resp;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      r.error = "timeout";
      break;
    }
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  shutdown(fd, SHUT_RDWR);
  writer.join();
  close(fd);
  const auto head_end = resp.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    if (r.error.empty()) r.error = "no response (" + std::to_string(resp.size()) + " bytes)";
    return r;
  }
  std::istringstream head(resp.substr(0, head_end));
  std::string line;
  std::getline(head, line);
  if (line.size() > 12) r.status = std::stoi(line.substr(9, 3));
  r.headers = HeadFields(head);
  r.body = resp.substr(head_end + 4);
  return r;
}

CliResult RunCli(const std::vector<std::string>& args, const std::string& stdin_data,
                 const std::vector<std::string>& env) {
  std::vector<std::string> argv = {BinDir() + "/shoal"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> clean_env = {"PATH=/usr/bin:/bin", "HOME=/nonexistent"};
  clean_env.insert(clean_env.end(), env.begin(), env.end());
  return RunProcess(std::move(argv), stdin_data, &clean_env);
}

Shoald::Shoald() {
  state_dir_ = MakeTempDir("shoal-it");
  node_ = "it" + std::to_string(getpid()) + "-" + state_dir_.substr(state_dir_.size() - 6);
  log_path_ = state_dir_ + "/shoald.log";
}

Shoald::~Shoald() {
  if (pid_ > 0) Stop(SIGKILL);
  // A shoald killed with SIGKILL leaves its tenants' pools in /dev/shm (on purpose: a restart
  // takes them over); the test's node name is unique, so they are this test's to remove.
  std::string cmd = "rm -rf '" + state_dir_ + "' /dev/shm/shoal." + node_ +
                    ".* /dev/hugepages/shoal." + node_ + ".*";
  (void)!system(cmd.c_str());
}

bool Shoald::Start(const Options& o) {
  const std::string cfg = state_dir_ + "/shoald.yaml";
  {
    std::ofstream f(cfg);
    f << "node_name: " << node_ << "\n"
      << "listen_host: 127.0.0.1\nlisten_port: 0\ncontrol_port: 0\n"
      << "state_dir: " << state_dir_ << "/state\n"
      << "gateway_threads: " << o.threads << "\n"
      << "pool_bytes: " << o.pool_bytes
      << "\n"
      // The pool backend under test: boost unless ctest runs the dpdk variant of the suite.
      << "pool: " << (o.pool.empty() ? TestPoolBackend() : o.pool) << "\n"
      << "max_body_bytes: " << o.max_body_bytes << "\n"
      << "dataplane: " << o.dataplane << "\n"
      << "bpf_pin_root: /sys/fs/bpf/shoal-it\n"
      << o.extra_yaml;
  }
  const auto log_offset = ReadFile(log_path_).size();
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string bin = o.binary.empty() ? BinDir() + "/shoald" : o.binary;
    execl(bin.c_str(), bin.c_str(), "--standalone", "-c", cfg.c_str(), nullptr);
    _exit(127);
  }
  const std::regex ready_re(
      "shoald ready on http://[0-9.]+:([0-9]+) \\(data plane [a-z]+; control API "
      "https?://[0-9.]+:([0-9]+)\\)");
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::string log = ReadFile(log_path_).substr(log_offset);
    std::smatch m;
    if (std::regex_search(log, m, ready_re)) {
      port_ = static_cast<uint16_t>(std::stoi(m[1]));
      control_port_ = static_cast<uint16_t>(std::stoi(m[2]));
      std::istringstream conf(ReadFile(admin_conf()));
      std::string line;
      while (std::getline(conf, line)) {
        if (line.rfind("token: ", 0) == 0) admin_token_ = line.substr(7);
      }
      return Http(port_, "GET", "/readyz").status == 200;
    }
  }
  return false;
}

int Shoald::Stop(int sig) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Shoald::Log() const { return ReadFile(log_path_); }

CliResult Shoald::Deploy(const std::string& manifest) {
  return Cli({"deploy", "-f", "-"}, manifest);
}

std::string Shoald::AuthHeader(const std::string& token) const {
  return "Authorization: Bearer " + (token.empty() ? admin_token_ : token);
}

HttpResult Shoald::Api(const std::string& method, const std::string& path, const std::string& body,
                       std::vector<std::string> headers, const std::string& token) {
  if (token != "-") headers.push_back(AuthHeader(token));
  return Http(control_port_, method, path, body, headers);
}

CliResult Shoald::Cli(const std::vector<std::string>& args, const std::string& stdin_data,
                      const std::string& token) {
  std::vector<std::string> env = {"SHOAL_CONFIG=" + admin_conf()};
  if (!token.empty()) env.push_back("SHOAL_TOKEN=" + token);
  return RunCli(args, stdin_data, env);
}

std::string Shoald::CreateToken(const std::string& role, const std::string& ns,
                                const std::string& job) {
  nlohmann::json req{{"role", role}};
  if (!ns.empty()) req["namespace"] = ns;
  if (!job.empty()) req["job"] = job;
  auto r = Api("POST", "/v1/tokens", req.dump(), {"Content-Type: application/json"});
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (r.status != 201 || j.is_discarded() || !j.contains("token")) return {};
  return j["token"].get<std::string>();
}

bool Shoald::WaitReady(const std::string& function, int ready, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    auto r = Api("GET", "/v1/functions/" + function);
    if (r.status == 200) {
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      if (!j.is_discarded() && j.contains("status") && j["status"].value("ready", -1) == ready) {
        return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<int> Shoald::InstancePids(const std::string& function) {
  std::vector<int> pids;
  auto r = Api("GET", "/v1/functions/" + function);
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("status")) return pids;
  for (const auto& inst : j["status"].value("instances", nlohmann::json::array())) {
    pids.push_back(inst.value("pid", 0));
  }
  return pids;
}

double Shoald::Metric(const std::string& name, const std::string& label_filter) {
  auto r = Http(port_, "GET", "/metrics");
  std::istringstream in(r.body);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : ' ';
    if (next != '{' && next != ' ') continue;
    if (!label_filter.empty() && line.find(label_filter) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

}  // namespace shoal::testing
