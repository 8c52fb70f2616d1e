// `shoal fl watch` against a real shoald while a small FL job trains (FedAvg on sklearn's
// digits, the shoal-client binary's four clients): on a pseudo-terminal the bar is redrawn in
// place and climbs through several percentages to 100% and the done line, exit 0; on a pipe the
// same watch prints plain lines (no escape codes, no carriage returns); with -o json, one JSON
// object per line ending in the done state.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "shoal/tools/flsim/dataset.h"
#include "tests/support/shoald_data_test.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;

// One `shoal` process whose stdout is a pseudo-terminal or a pipe, read to its end by a thread.
class Watcher {
 public:
  Watcher(const Shoald& shoald, std::vector<std::string> args, bool terminal) {
    args.insert(args.begin(), {BinDir() + "/shoal", "--server",
                               "http://127.0.0.1:" + std::to_string(shoald.control_port())});
    const std::string config = "SHOAL_CONFIG=" + shoald.state_dir() + "/state/admin.conf";
    int pipe_fds[2] = {-1, -1};
    if (terminal) {
      winsize ws{};
      ws.ws_col = 100;
      ws.ws_row = 30;
      pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    } else {
      if (pipe(pipe_fds) != 0) return;
      pid_ = fork();
      fd_ = pipe_fds[0];
    }
    if (pid_ == 0) {
      if (!terminal) {
        dup2(pipe_fds[1], 1);
        close(pipe_fds[0]);
        close(pipe_fds[1]);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      std::vector<std::string> env = {config, "PATH=/usr/bin:/bin", "TERM=xterm"};
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (!terminal) close(pipe_fds[1]);
    reader_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        const ssize_t n = read(fd_, buf, sizeof buf);
        if (n <= 0) return;  // EOF, or EIO once the terminal's last writer is gone
        out_.append(buf, static_cast<size_t>(n));
      }
    });
  }
  ~Watcher() {
    if (pid_ > 0 && exit_code_ < 0) kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(5));
  }
  // The exit code (128 + signal if killed), killing it after `timeout`.
  int Wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0 || exit_code_ >= 0) return exit_code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (reader_.joinable()) reader_.join();
    close(fd_);
    return exit_code_;
  }
  const std::string& out() const { return out_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int exit_code_ = -1;
  std::string out_;
  std::thread reader_;
};

std::set<int> Percentages(const std::string& text) {
  std::set<int> seen;
  const std::regex pct(R"(([0-9]+)% +to accuracy)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pct); it != std::sregex_iterator();
       ++it) {
    seen.insert(std::stoi((*it)[1]));
  }
  return seen;
}

using FlWatchTest = DigitsShoaldTest;

TEST_F(FlWatchTest, TheBarClimbsToTheTargetOnATerminalAndStaysPlainOnAPipe) {
  // Few local steps at a small learning rate: the accuracy climbs over several versions, so the
  // watchers (polling every 0.1 s) see it rise.
  const std::string manifest =
      "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: watched\nspec:\n"
      "  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 64, seed: 1}\n"
      "  data: {dataset: digits}\n  clients: {expected: 4}\n"
      "  stop: {rounds: 200, accuracy: 0.9}\n"
      "  training: {localSteps: 4, learningRate: 0.05, batchSize: 32}\n"
      "  aggregation: {maxFanIn: 2, maxLeaves: 2}\n";
  std::string token;
  ASSERT_NO_FATAL_FAILURE(DeployFlJob(manifest, "watched", &token));

  const std::vector<std::string> watch = {"fl", "watch", "watched", "--interval", "0.1"};
  Watcher tty(shoald_, watch, /*terminal=*/true);
  Watcher plain(shoald_, watch, /*terminal=*/false);
  std::vector<std::string> json_args = watch;
  json_args.insert(json_args.end(), {"-o", "json"});
  Watcher json(shoald_, json_args, /*terminal=*/false);

  const std::string client_out = RunDigitsClients("watched", token, "--max-seconds 30");
  const Json st = Json::parse(shoald_.Api("GET", "/v1/jobs/watched").body, nullptr, false);
  ASSERT_EQ(st.value("state", ""), "done") << client_out;
  ASSERT_GE(st.value("best_accuracy", 0.0), 0.9) << client_out;
  const std::string done_prefix =
      "fljob/watched done: version " + std::to_string(st.value("version", 0)) + ", best accuracy ";

  // The terminal: redrawn in place, several distinct percentages on the way, ending at 100%.
  ASSERT_EQ(tty.Wait(std::chrono::seconds(10)), 0) << tty.out();
  const std::string& t = tty.out();
  EXPECT_NE(t.find("\r\x1b[3Afljob/watched  fedavg  running"), std::string::npos) << t;
  const std::set<int> seen = Percentages(t);
  EXPECT_GE(seen.size(), 3u) << t;
  EXPECT_EQ(*seen.rbegin(), 100) << t;
  EXPECT_NE(t.find("[" + std::string(57, '#') + "]  100%  to accuracy 0.9000 or 200 rounds"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("\r\n" + done_prefix), std::string::npos) << t;
  EXPECT_EQ(t.substr(t.size() - 6), "\x1b[?25h");  // the cursor shown again

  // The pipe: plain lines only, the percentages never going down, then the done line.
  ASSERT_EQ(plain.Wait(std::chrono::seconds(10)), 0) << plain.out();
  const std::string& o = plain.out();
  EXPECT_EQ(o.find('\x1b'), std::string::npos) << o;
  EXPECT_EQ(o.find('\r'), std::string::npos) << o;
  std::istringstream lines(o);
  std::vector<std::string> all;
  int last_pct = -1;
  for (std::string line; std::getline(lines, line);) {
    all.push_back(line);
    const std::set<int> pct = Percentages(line);
    if (pct.empty()) continue;
    EXPECT_GE(*pct.begin(), last_pct) << o;
    last_pct = *pct.begin();
  }
  ASSERT_GE(all.size(), 3u) << o;
  EXPECT_EQ(last_pct, 100) << o;
  EXPECT_EQ(all.back().rfind(done_prefix, 0), 0u) << o;
  EXPECT_GE(Percentages(o).size(), 3u) << o;

  // -o json: every line an object; the last one done at progress 1.
  ASSERT_EQ(json.Wait(std::chrono::seconds(10)), 0) << json.out();
  std::istringstream jlines(json.out());
  Json last;
  size_t objects = 0;
  for (std::string line; std::getline(jlines, line); ++objects) {
    last = Json::parse(line, nullptr, false);
    ASSERT_FALSE(last.is_discarded()) << line;
  }
  EXPECT_GE(objects, 3u);
  EXPECT_EQ(last.value("state", ""), "done");
  EXPECT_EQ(last.value("progress", 0.0), 1.0);
  EXPECT_EQ(last.value("target_rounds", 0), 200);
  EXPECT_GE(last.value("best_accuracy", 0.0), 0.9);
}

}  // namespace
}  // namespace shoal::testing
