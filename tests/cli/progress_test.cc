// The CLI's live-progress rendering (shoal/cli/progress.h, shoal/cli/fl_progress.h): bars at
// several widths, ETA and byte formats, the in-place block's escape sequences, terminal vs plain
// detection, and an FL job's progress and lines computed from its status JSON.
#include "shoal/cli/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "shoal/cli/fl_progress.h"

namespace shoal::cli {
namespace {

using nlohmann::json;

TEST(CliProgressTest, BarHasExactlyTheWidthAndFillsOnlyAtOne) {
  EXPECT_EQ(RenderBar(0, 12), "[----------]");
  EXPECT_EQ(RenderBar(0.5, 12), "[#####-----]");
  EXPECT_EQ(RenderBar(0.26, 12), "[##--------]");
  EXPECT_EQ(RenderBar(0.999, 12), "[#########-]");  // not full until done
  EXPECT_EQ(RenderBar(1, 12), "[##########]");
  EXPECT_EQ(RenderBar(7.5, 12), "[##########]");  // clamped
  EXPECT_EQ(RenderBar(-1, 12), "[----------]");
  EXPECT_EQ(RenderBar(std::nan(""), 6), "[----]");
  EXPECT_EQ(RenderBar(0.5, 1), "[-]");  // never narrower than 3
  EXPECT_EQ(RenderBar(1, 3), "[#]");
  for (int w : {3, 10, 40, 80, 200}) {
    for (double f : {0.0, 0.33, 0.5, 0.99, 1.0}) {
      EXPECT_EQ(RenderBar(f, w).size(), static_cast<size_t>(w)) << w << " " << f;
    }
  }
}

TEST(CliProgressTest, PercentRoundsDown) {
  const std::pair<double, const char*> kCases[] = {
      {0, "  0%"}, {0.059, "  5%"}, {0.5, " 50%"},  {0.9999, " 99%"},
      {1, "100%"}, {3, "100%"},     {-0.2, "  0%"},
  };
  for (const auto& [fraction, text] : kCases) EXPECT_EQ(FormatPercent(fraction), text) << fraction;
}

TEST(CliProgressTest, EtaFormats) {
  EXPECT_EQ(FormatEta(std::nullopt), "-");
  const std::pair<double, const char*> kCases[] = {
      {-1.0, "-"},
      {std::numeric_limits<double>::infinity(), "-"},
      {0.0, "0s"},
      {0.4, "<1s"},
      {1.0, "1s"},
      {42.4, "42s"},
      {59.6, "1m00s"},
      {185.0, "3m05s"},
      {3599.0, "59m59s"},
      {3600.0, "1h00m"},
      {2 * 3600 + 7 * 60 + 30.0, "2h07m"},
      {100 * 3600.0, ">99h"},
  };
  for (const auto& [seconds, text] : kCases) EXPECT_EQ(FormatEta(seconds), text) << seconds;
}

TEST(CliProgressTest, ByteProgress) {
  EXPECT_EQ(FormatByteProgress(512, 1000), "512B/1000B");
  EXPECT_EQ(FormatByteProgress(1536, 3 << 20), "1.5Ki/3.0Mi");
  EXPECT_EQ(FormatByteProgress(5ull << 30, -1), "5.0Gi");
}

TEST(CliProgressTest, BlockRedrawsInPlaceAndCutsLinesToTheWidth) {
  TerminalBlock block(10);
  // First frame: just the lines, each cleared to its end.
  EXPECT_EQ(block.Frame({"one", "two"}), "one\x1b[K\ntwo\x1b[K\n");
  // Then back up over both, rewrite; a line longer than the width - 1 is cut (no wrap).
  EXPECT_EQ(block.Frame({"three", "0123456789abc"}),
            "\r\x1b[2A"
            "three\x1b[K\n"
            "012345678\x1b[K\n");
  // A shorter frame clears the row the old one leaves below.
  EXPECT_EQ(block.Frame({"x"}), "\r\x1b[2Ax\x1b[K\n\x1b[J");
  EXPECT_EQ(RewriteLine("abcdef", 4), "\rabc\x1b[K");
  EXPECT_EQ(ClearLine(), "\r\x1b[K");
}

TEST(CliProgressTest, TerminalOnlyForATtyThatIsNotDumb) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(DetectOutputMode(pipe_fds[1], false), OutputMode::kPlain);
  EXPECT_EQ(DetectOutputMode(pipe_fds[1], true), OutputMode::kJson);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  const int null_fd = open("/dev/null", O_WRONLY);
  EXPECT_EQ(DetectOutputMode(null_fd, false), OutputMode::kPlain);
  close(null_fd);

  int master = -1, slave = -1;
  winsize ws{};
  ws.ws_col = 57;
  ws.ws_row = 20;
  if (openpty(&master, &slave, nullptr, nullptr, &ws) != 0) GTEST_SKIP() << "no pseudo-terminals";
  const char* old_term = std::getenv("TERM");
  const std::string saved = old_term != nullptr ? old_term : "";
  setenv("TERM", "xterm", 1);
  EXPECT_EQ(DetectOutputMode(slave, false), OutputMode::kTerminal);
  EXPECT_EQ(DetectOutputMode(slave, true), OutputMode::kJson);  // -o json wins on a terminal
  EXPECT_EQ(TerminalWidth(slave), 57);
  setenv("TERM", "dumb", 1);
  EXPECT_EQ(DetectOutputMode(slave, false), OutputMode::kPlain);
  if (old_term != nullptr) {
    setenv("TERM", saved.c_str(), 1);
  } else {
    unsetenv("TERM");
  }
  close(master);
  close(slave);
}

json Status(const std::string& state, double elapsed, json versions, double target_accuracy,
            uint64_t target_rounds) {
  return json{{"name", "digits"},
              {"algorithm", "fedavg"},
              {"state", state},
              {"version", versions.empty() ? 0 : versions.back().value("version", 0)},
              {"clients", {{"expected", 4}, {"joined", 4}}},
              {"elapsed_s", elapsed},
              {"target_accuracy", target_accuracy},
              {"target_rounds", target_rounds},
              {"best_accuracy", 0.0},
              {"versions", versions}};
}

json V(uint64_t version, double t, json accuracy = nullptr, json loss = nullptr) {
  return json{{"version", version},
              {"elapsed_s", t},
              {"accuracy", accuracy},
              {"loss", loss},
              {"updates", 4}};
}

TEST(CliFlProgressTest, TowardTheAccuracyTarget) {
  // Versions every 2 s; accuracy evaluated on 1..4, rising 0.05 per version (0.025/s).
  json versions = json::array({V(0, 0)});
  for (int v = 1; v <= 5; ++v) {
    versions.push_back(v <= 4 ? V(v, 2.0 * v, 0.5 + 0.05 * v, 1.0 - 0.1 * v) : V(v, 2.0 * v));
  }
  const FlJobProgress p = JobProgress(Status("running", 10.0, versions, 0.9, 0));
  EXPECT_EQ(p.version, 5u);
  ASSERT_TRUE(p.evaluated_version.has_value());
  EXPECT_EQ(*p.evaluated_version, 4u);
  EXPECT_DOUBLE_EQ(*p.accuracy, 0.7);
  EXPECT_DOUBLE_EQ(*p.loss, 0.6);
  EXPECT_DOUBLE_EQ(*p.best_accuracy, 0.7);
  EXPECT_DOUBLE_EQ(*p.fraction, 0.7 / 0.9);
  EXPECT_DOUBLE_EQ(p.commits_per_min, 30);  // 5 versions in the job's 10 s
  // 0.2 left at 0.025/s = 8 s from version 4's commit at 8 s, 2 s of which have passed.
  EXPECT_NEAR(*p.eta_s, 6.0, 1e-9);
  EXPECT_FALSE(p.done());
  EXPECT_FALSE(p.failed());

  const std::vector<std::string> block = ProgressBlock(p, 60);
  ASSERT_EQ(block.size(), 3u);
  EXPECT_EQ(block[0], "fljob/digits  fedavg  running  version 5  clients 4/4");
  EXPECT_EQ(block[1], "[########################-------]   77%  to accuracy 0.9000");
  EXPECT_EQ(block[1].size(), 59u);  // the bar takes what the terminal's width leaves
  EXPECT_EQ(block[2], "accuracy 0.7000 (v4)  loss 0.6000  30.0 commits/min  ETA 6s  elapsed 10s");
  EXPECT_EQ(ProgressBlock(p, 200)[1].size(), 60u + 26u);             // the bar stops growing at 60
  EXPECT_EQ(ProgressBlock(p, 20)[1].substr(0, 12), "[######--]  ");  // nor shrinks below 10

  const std::string line = ProgressLine(p);
  EXPECT_EQ(line,
            "fljob/digits  running  version 5   77% to accuracy 0.9000  accuracy 0.7000 (v4)  "
            "loss 0.6000  30.0 commits/min  ETA 6s");
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_EQ(line.find('\r'), std::string::npos);

  const json j = ProgressJson(p);
  EXPECT_EQ(j["job"], "digits");
  EXPECT_EQ(j["version"], 5);
  EXPECT_DOUBLE_EQ(j["progress"].get<double>(), 0.7 / 0.9);
  EXPECT_DOUBLE_EQ(j["accuracy"].get<double>(), 0.7);
  EXPECT_EQ(j["evaluated_version"], 4);
  EXPECT_TRUE(j["target_rounds"].is_null());
  EXPECT_NEAR(j["eta_s"].get<double>(), 6.0, 1e-9);
}

TEST(CliFlProgressTest, TowardRoundsWhenThereIsNoAccuracyTarget) {
  json versions = json::array({V(0, 0)});
  for (int v = 1; v <= 6; ++v) versions.push_back(V(v, 10.0 * v));  // one every 10 s
  // 90 s in: the last minute (30..90 s] holds versions 4, 5 and 6.
  const FlJobProgress p = JobProgress(Status("running", 90.0, versions, 0, 24));
  EXPECT_DOUBLE_EQ(*p.fraction, 6.0 / 24);
  EXPECT_DOUBLE_EQ(p.commits_per_min, 3);
  EXPECT_DOUBLE_EQ(*p.eta_s, 18 * 20.0);  // 18 rounds left at one per 20 s
  EXPECT_FALSE(p.accuracy.has_value());
  const std::vector<std::string> block = ProgressBlock(p, 50);
  EXPECT_EQ(block[0], "fljob/digits  fedavg  running  version 6/24  clients 4/4");
  EXPECT_EQ(block[1], "[######---------------------]   25%  to 24 rounds");
  EXPECT_EQ(block[2], "accuracy -  loss -  3.0 commits/min  ETA 6m00s  elapsed 1m30s");
}

TEST(CliFlProgressTest, BothTargetsTheNearerWinsAndDoneIsFull) {
  json versions = json::array({V(0, 0), V(1, 1, 0.3), V(2, 2, 0.45), V(3, 3)});
  FlJobProgress p = JobProgress(Status("running", 3.0, versions, 0.9, 4));
  EXPECT_DOUBLE_EQ(*p.fraction, 0.75);  // 3/4 rounds beats 0.45/0.9
  EXPECT_NEAR(*p.eta_s, 1.0, 1e-9);     // one round at 60/min, sooner than the accuracy
  EXPECT_EQ(ProgressBlock(p, 80)[1].substr(ProgressBlock(p, 80)[1].find("  75%")),
            "  75%  to accuracy 0.9000 or 4 rounds");

  p = JobProgress(Status("done", 3.5, versions, 0.9, 4));
  EXPECT_DOUBLE_EQ(*p.fraction, 1.0);
  EXPECT_DOUBLE_EQ(*p.eta_s, 0.0);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(ProgressBlock(p, 40)[1], "[########]  100%  to accuracy 0.9000 or 4 rounds");
  EXPECT_EQ(DoneLine(p),
            "fljob/digits done: version 3, best accuracy 0.4500 (target 0.9000), 3.5s");
}

TEST(CliFlProgressTest, NoStopConditionAndFailure) {
  FlJobProgress p = JobProgress(Status("running", 0.5, json::array({V(0, 0)}), 0, 0));
  EXPECT_FALSE(p.fraction.has_value());
  EXPECT_FALSE(p.eta_s.has_value());
  EXPECT_EQ(p.commits_per_min, 0);  // under a second old: no rate yet
  EXPECT_EQ(ProgressBlock(p, 80)[1], "no stop condition: the job runs until it is deleted");
  EXPECT_EQ(ProgressLine(p),
            "fljob/digits  running  version 0  accuracy -  loss -  0.0 commits/min  ETA -");
  EXPECT_TRUE(JobProgress(Status("failed", 1, json::array(), 0.9, 0)).failed());
  EXPECT_EQ(DoneLine(JobProgress(Status("done", 2, json::array(), 0, 3))),
            "fljob/digits done: version 0, best accuracy - (target none), 2.0s");
}

}  // namespace
}  // namespace shoal::cli
