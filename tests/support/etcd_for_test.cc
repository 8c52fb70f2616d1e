#include "tests/support/etcd_for_test.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "shoal/common/file_io.h"
#include "shoald_fixture.h"
#include "tests/support/temp_dir.h"

namespace shoal::testing {
std::string EtcdMissing() {
  if (access(kEtcdBinary, X_OK) != 0) {
    return std::string(kEtcdBinary) + " is missing (Debian package etcd-server)";
  }
  return "";
}

EtcdForTest::EtcdForTest(int members, std::string host) : host_(std::move(host)) {
  dir_ = MakeTempDir("shoal-etcd");
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = std::string("m").append(std::to_string(i));
    m.client_port = FreePort();
    m.peer_port = FreePort();
    m.data_dir = dir_ + "/" + m.name;
    m.log_path = dir_ + "/" + m.name + ".log";
    members_.push_back(m);
  }
}

EtcdForTest::~EtcdForTest() {
  for (int i = 0; i < members(); ++i) Kill(i);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

bool EtcdForTest::Spawn(Member& m, bool first_start) {
  std::string cluster;
  for (const auto& o : members_) {
    if (!cluster.empty()) cluster += ',';
    cluster += o.name;
    cluster += "=http://";
    cluster += host_;
    cluster += ':';
    cluster += std::to_string(o.peer_port);
  }
  const std::string client = "http://" + host_ + ":" + std::to_string(m.client_port);
  const std::string peer = "http://" + host_ + ":" + std::to_string(m.peer_port);
  std::vector<std::string> args = {
      kEtcdBinary, "--name", m.name, "--data-dir", m.data_dir, "--listen-client-urls", client,
      "--advertise-client-urls", client, "--listen-peer-urls", peer,
      "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
      "--initial-cluster-token", "shoal-test", "--initial-cluster-state", "new",
      // Quick elections for the fault tests.
      "--heartbeat-interval", "50", "--election-timeout", "500"};
  (void)first_start;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int fd = open(m.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    setenv("ETCD_UNSUPPORTED_ARCH", "", 0);
    execv(kEtcdBinary, argv.data());
    _exit(127);
  }
  m.pid = pid;
  return true;
}

bool EtcdForTest::WaitHealthy(int i, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    auto r = HttpAt(host_, members_[i].client_port, "GET", "/health", {}, {}, 0, 1000);
    if (r.status == 200 && r.body.find("\"health\":\"true\"") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

bool EtcdForTest::Start() {
  for (auto& m : members_) {
    if (!Spawn(m, true)) return false;
  }
  for (int i = 0; i < members(); ++i) {
    if (!WaitHealthy(i, 20000)) return false;
  }
  return true;
}

void EtcdForTest::Kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  kill(m.pid, SIGKILL);
  waitpid(m.pid, nullptr, 0);
  m.pid = -1;
}

bool EtcdForTest::Restart(int i) {
  Kill(i);
  if (!Spawn(members_[i], false)) return false;
  return WaitHealthy(i, 20000);
}

std::string EtcdForTest::endpoint(int i) const {
  return "http://" + host_ + ":" + std::to_string(members_[i].client_port);
}

std::string EtcdForTest::endpoints() const {
  std::string out;
  for (int i = 0; i < members(); ++i) {
    if (!out.empty()) out += ',';
    out += endpoint(i);
  }
  return out;
}

std::string EtcdForTest::Log(int i) const {
  return ReadFileBytes(members_[i].log_path).value_or("");
}

}  // namespace shoal::testing
