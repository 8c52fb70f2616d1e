// A real etcd for tests: /usr/bin/etcd (Debian's etcd-server) started on free loopback ports
// with its data in a temporary directory, one member or several (a real raft cluster), killed
// and restarted on the same data as a test needs. Tests skip naming the binary when it is
// missing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::testing {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

// "" when etcd can run here, else why not (for GTEST_SKIP).
std::string EtcdMissing();

class EtcdForTest {
 public:
  // Members listen on `host` (loopback, or a test cluster's bridge address).
  explicit EtcdForTest(int members = 1, std::string host = "127.0.0.1");
  ~EtcdForTest();  // kills every member and removes the data
  EtcdForTest(const EtcdForTest&) = delete;
  EtcdForTest& operator=(const EtcdForTest&) = delete;

  // Starts every member and waits until the cluster answers (false, with the log, if not).
  bool Start();
  // SIGKILLs member i (its data stays); Restart(i) starts it again on the same data and ports.
  void Kill(int i);
  bool Restart(int i);
  // "http://127.0.0.1:P,..." of every member (the --etcd flag's form), or member i's URL.
  std::string endpoints() const;
  std::string endpoint(int i) const;
  std::string Log(int i) const;
  int members() const { return static_cast<int>(members_.size()); }

 private:
  struct Member {
    std::string name;
    uint16_t client_port = 0;
    uint16_t peer_port = 0;
    pid_t pid = -1;
    std::string data_dir;
    std::string log_path;
  };
  bool Spawn(Member& m, bool first_start);
  bool WaitHealthy(int i, int timeout_ms);
  std::string host_;
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace shoal::testing
