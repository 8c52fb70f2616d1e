// The command lines of shoal, shoald, shoal-client and shoal-controller
// (shoal/common/command_line.h): --help ends with examples (on every shoal command), and a bad
// command line gets exactly one line naming the flag and what it accepts, the help's
// whereabouts, and exit status 2. Each binary is run as built; none gets far enough to need root
// or a network.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {

using shoal::testing::CliResult;
using shoal::testing::RunProcess;

CliResult RunBinary(const char* bin, std::vector<std::string> args) {
  args.insert(args.begin(), bin);
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/nonexistent"};
  return RunProcess(std::move(args), "", &env);
}

// `bin args` is refused with exactly `message` and a pointer to `help_of`'s --help.
void ExpectRefused(const char* bin, const std::vector<std::string>& args,
                   const std::string& message, const std::string& help_of) {
  const CliResult r = RunBinary(bin, args);
  std::string cmd = bin;
  for (const auto& a : args) cmd += " " + a;
  EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.err;
  EXPECT_EQ(r.err, message + "\nRun '" + help_of + " --help' for the flags and examples.\n") << cmd;
  EXPECT_EQ(r.out, "") << cmd;
}

// `bin args --help` exits 0 and its last lines are "Examples:" and `first` (then the others).
void ExpectExamples(const char* bin, std::vector<std::string> args, const std::string& first) {
  args.push_back("--help");
  const CliResult r = RunBinary(bin, args);
  std::string cmd = bin;
  for (const auto& a : args) cmd += " " + a;
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
  const size_t at = r.out.find("\nExamples:\n  " + first + "\n");
  EXPECT_NE(at, std::string::npos) << cmd << "\n" << r.out;
  EXPECT_EQ(r.out.find("Examples:", at + 2), std::string::npos) << cmd;
}

const char* const kShoaldFlags =
    "-c/--config, --standalone, --etcd, --cluster, --advertise, --print-config, --port, --host, "
    "--control-port, --state-dir, --node-name, --dataplane, --instance-start, --threads, "
    "--pool-bytes, --max-body-bytes, --log-level";

TEST(UsageTest, Shoald) {
  ExpectExamples(SHOALD_BIN, {},
                 "shoald --standalone   # one node: gateway :8080, control API 127.0.0.1:8081");
  ExpectRefused(SHOALD_BIN, {"--port", "abc"},
                "shoald: --port: 'abc' is not a whole number >= 0 (listen port (config "
                "listen_port))",
                "shoald");
  ExpectRefused(SHOALD_BIN, {"--port"},
                "shoald: --port needs a value: a whole number >= 0 (listen port (config "
                "listen_port))",
                "shoald");
  ExpectRefused(SHOALD_BIN, {"--prot", "80"},
                std::string("shoald: unknown flag --prot; the flags are ") + kShoaldFlags,
                "shoald");
  ExpectRefused(SHOALD_BIN, {"--standalone", "--threads", "-1"},
                "shoald: --threads: '-1' is not a whole number >= 0 (gateway event loops, 0 = "
                "one per core)",
                "shoald");
  ExpectRefused(SHOALD_BIN, {"extra"}, "shoald: unexpected argument 'extra'", "shoald");
}

TEST(UsageTest, Shoal) {
  ExpectExamples(SHOAL_CLI_BIN, {}, "shoal deploy -f deploy/examples/echo.yaml");
  // Every command and subcommand's --help ends with examples of itself.
  const std::vector<std::vector<std::string>> commands = {{"deploy"},
                                                          {"get"},
                                                          {"describe"},
                                                          {"invoke"},
                                                          {"logs"},
                                                          {"delete"},
                                                          {"top"},
                                                          {"fl"},
                                                          {"fl", "status"},
                                                          {"fl", "watch"},
                                                          {"fl", "model"},
                                                          {"fl", "list"},
                                                          {"fl", "delete"},
                                                          {"token"},
                                                          {"token", "create"},
                                                          {"token", "list"},
                                                          {"token", "revoke"},
                                                          {"sim"},
                                                          {"sim", "train"},
                                                          {"validate"},
                                                          {"explain"}};
  for (const auto& c : commands) {
    std::string path = "shoal";
    for (const auto& w : c) path += " " + w;
    const CliResult r = RunBinary(SHOAL_CLI_BIN, [&] {
      auto a = c;
      a.push_back("--help");
      return a;
    }());
    EXPECT_EQ(r.exit_code, 0) << path;
    const size_t at = r.out.find("\nExamples:\n  ");
    ASSERT_NE(at, std::string::npos) << path << "\n" << r.out;
    const std::string first = r.out.substr(at + 13, r.out.find('\n', at + 13) - at - 13);
    // The first example runs this very command (token create's is inside $(...)).
    EXPECT_NE(
        first.find(c.front() == "token" && c.size() > 1 && c[1] == "create" ? "$(" + path : path),
        std::string::npos)
        << path << ": " << first;
  }
  ExpectRefused(SHOAL_CLI_BIN, {"get", "-o", "xml"},
                "shoal: --output: 'xml' is not one of wide, json, yaml", "shoal get");
  ExpectRefused(SHOAL_CLI_BIN, {"--bogus", "get"},
                "shoal: unknown flag --bogus; the flags are -o/--output, --server, --gateway",
                "shoal get");
  ExpectRefused(SHOAL_CLI_BIN, {"token", "create"},
                "shoal: --role is required (admin, deployer, viewer, invoker or fl-client)",
                "shoal token create");
  ExpectRefused(SHOAL_CLI_BIN, {"token", "create", "--role", "god"},
                "shoal: --role: 'god' is not one of admin, deployer, viewer, invoker, fl-client",
                "shoal token create");
  ExpectRefused(SHOAL_CLI_BIN, {"top", "--interval", "0"},
                "shoal: --interval: '0' is not a number > 0 (seconds between refreshes)",
                "shoal top");
  ExpectRefused(SHOAL_CLI_BIN, {"fl", "watch"}, "shoal: JOB is required (job name)",
                "shoal fl watch");
  ExpectRefused(SHOAL_CLI_BIN, {"fl", "watch", "j", "--bad"},
                "shoal: unknown flag --bad; the flags are --interval, -o/--output, --server, "
                "--gateway",
                "shoal fl watch");
  ExpectRefused(SHOAL_CLI_BIN, {"fl"},
                "shoal: a command is required: status, watch, model, list, delete, supernode",
                "shoal fl");
  ExpectRefused(SHOAL_CLI_BIN, {"frob"},
                "shoal: unknown command 'frob'; the commands are deploy, get, describe, invoke, "
                "logs, delete, top, fl, token, sim, validate, explain",
                "shoal");
}

TEST(UsageTest, ShoalClient) {
  ExpectExamples(SHOAL_CLIENT_BIN, {},
                 "shoal-client --server http://127.0.0.1:8080 --job fmnist --clients 16");
  ExpectRefused(SHOAL_CLIENT_BIN, {"--server", "http://127.0.0.1:1", "--clients", "0"},
                "shoal-client: --clients: '0' is not a number from 1 to 4096 (simulated clients "
                "in this process)",
                "shoal-client");
  ExpectRefused(SHOAL_CLIENT_BIN, {"--server"},
                "shoal-client: --server needs a value (shoald's URL, e.g. http://localhost:8080)",
                "shoal-client");
  ExpectRefused(SHOAL_CLIENT_BIN, {"--job", "x"},
                "shoal-client: --server is required (shoald's URL, e.g. http://localhost:8080)",
                "shoal-client");
  ExpectRefused(SHOAL_CLIENT_BIN, {"--server", "http://127.0.0.1:1", "--time-scale", "-1"},
                "shoal-client: --time-scale: '-1' is not a number >= 0 (simulated training time "
                "= local_steps x seconds per step x this)",
                "shoal-client");
}

TEST(UsageTest, ShoalController) {
  ExpectExamples(SHOAL_CONTROLLER_BIN, {}, "shoal-controller --etcd http://127.0.0.1:2379");
  ExpectRefused(SHOAL_CONTROLLER_BIN, {},
                "shoal-controller: --etcd is required (etcd client URLs, http://host:port[,...])",
                "shoal-controller");
  ExpectRefused(SHOAL_CONTROLLER_BIN, {"--nope"},
                "shoal-controller: unknown flag --nope; the flags are --etcd, --cluster, --host, "
                "--port, --state-dir, --name, --lease-ttl, --allow-insecure, --log-level, "
                "--kubernetes, --kube-api, --kube-token-file, --kube-ca, --kube-resync, "
                "--kube-status-interval-ms",
                "shoal-controller");
  ExpectRefused(SHOAL_CONTROLLER_BIN, {"--etcd", "http://127.0.0.1:1", "--port", "70000"},
                "shoal-controller: --port: '70000' is not a whole number >= 0 (listen port of "
                "the control API (0: any free port))",
                "shoal-controller");
  ExpectRefused(SHOAL_CONTROLLER_BIN, {"--etcd", "http://127.0.0.1:1", "--lease-ttl", "1.5"},
                "shoal-controller: --lease-ttl: '1.5' is not a whole number (the leader's lease "
                "TTL in seconds (take-over time))",
                "shoal-controller");
}

}  // namespace
