// Test support for integration tests: a real shoald process on a free port with its own state
// directory, node name and BPF pin root; a raw-socket HTTP/1.1 client; and a runner for the
// `shoal` CLI. Nothing here is faked: every test talks to the real daemon over real sockets.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "run_process.h"

namespace shoal::testing {

std::string BinDir();  // build/bin
std::string LibDir();  // build/lib
bool IsRoot();
// A loopback TCP port that was free a moment ago (for a process the test starts to listen on).
uint16_t FreePort();

struct HttpResult {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;  // transport error, if any
};

// One request on a fresh connection. `chunk_size` > 0 sends the body chunked.
HttpResult Http(uint16_t port, const std::string& method, const std::string& path,
                const std::string& body = {}, const std::vector<std::string>& headers = {},
                size_t chunk_size = 0, int timeout_ms = 60000);
// The same to `ipv4`:port (a node of a test cluster, in its own network namespace).
HttpResult HttpAt(const std::string& ipv4, uint16_t port, const std::string& method,
                  const std::string& path, const std::string& body = {},
                  const std::vector<std::string>& headers = {}, size_t chunk_size = 0,
                  int timeout_ms = 60000);

// Runs the `shoal` CLI with `env` ("NAME=value") added to a clean environment (PATH only).
CliResult RunCli(const std::vector<std::string>& args, const std::string& stdin_data = {},
                 const std::vector<std::string>& env = {});

class Shoald {
 public:
  struct Options {
    std::string dataplane = "auto";
    uint64_t pool_bytes = 512ull << 20;
    uint64_t max_body_bytes = 128ull << 20;
    uint32_t threads = 2;
    std::string pool;        // `pool:` (boost|dpdk|auto); empty: TestPoolBackend()
    std::string extra_yaml;  // appended to the config file
    std::string binary;      // the shoald to run; empty: BinDir()/shoald
  };
  Shoald();
  ~Shoald();
  // Starts shoald and waits until /readyz answers (or it exits). Reuses the state dir across
  // restarts of the same object.
  bool Start(const Options& options);
  bool Start() { return Start(Options{}); }
  // SIGTERM (or `sig`) and wait for exit; returns the exit status.
  int Stop(int sig = 15);
  uint16_t port() const { return port_; }                  // the public gateway
  uint16_t control_port() const { return control_port_; }  // the control API's listener
  // The first admin token, as shoald saved it in <state>/admin.conf on its first start.
  const std::string& admin_token() const { return admin_token_; }
  std::string admin_conf() const { return state_dir_ + "/state/admin.conf"; }
  // "Authorization: Bearer <token>" (the admin's by default).
  std::string AuthHeader(const std::string& token = {}) const;
  // A request to the control API with the admin's token (or `token`; "-" sends none).
  HttpResult Api(const std::string& method, const std::string& path, const std::string& body = {},
                 std::vector<std::string> headers = {}, const std::string& token = {});
  // The CLI as the first admin runs it (SHOAL_CONFIG=<state>/admin.conf), or with `token`.
  CliResult Cli(const std::vector<std::string>& args, const std::string& stdin_data = {},
                const std::string& token = {});
  // Creates a token through the API as the admin; returns it ("" on failure).
  std::string CreateToken(const std::string& role, const std::string& ns = {},
                          const std::string& job = {});
  pid_t pid() const { return pid_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& node() const { return node_; }
  std::string Log() const;
  // Deploys manifest text through the CLI; returns the CLI's result.
  CliResult Deploy(const std::string& manifest);
  // Waits until `function` has `ready` ready instances (from GET /v1/functions/<name>).
  bool WaitReady(const std::string& function, int ready, int timeout_ms = 10000);
  std::vector<int> InstancePids(const std::string& function);
  // A metric's value from /metrics (sum over series whose labels contain `label_filter`).
  double Metric(const std::string& name, const std::string& label_filter = {});

 private:
  std::string state_dir_;
  std::string node_;
  std::string log_path_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  uint16_t control_port_ = 0;
  std::string admin_token_;
};

}  // namespace shoal::testing
