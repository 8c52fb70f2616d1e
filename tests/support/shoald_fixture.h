// Test support for integration tests: a real shoald process on a free port with its own state
// directory, node name and BPF pin root; a raw-socket HTTP/1.1 client; and a runner for the
// `shoal` CLI. Nothing here is faked: every test talks to the real daemon over real sockets.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shoal::testing {

std::string BinDir();  // build/bin
std::string LibDir();  // build/lib
bool IsRoot();

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

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CliResult RunCli(uint16_t port, const std::vector<std::string>& args, const std::string& stdin_data = {});

class Shoald {
 public:
  struct Options {
    std::string dataplane = "auto";
    uint64_t pool_bytes = 512ull << 20;
    uint64_t max_body_bytes = 128ull << 20;
    uint32_t threads = 2;
    std::string extra_yaml;  // appended to the config file
  };
  Shoald();
  ~Shoald();
  // Starts shoald and waits until /readyz answers (or it exits). Reuses the state dir across
  // restarts of the same object.
  bool Start(const Options& options);
  bool Start() { return Start(Options{}); }
  // SIGTERM (or `sig`) and wait for exit; returns the exit status.
  int Stop(int sig = 15);
  uint16_t port() const { return port_; }
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
};

}  // namespace shoal::testing
