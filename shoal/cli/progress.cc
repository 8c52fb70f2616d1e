#include "shoal/cli/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shoal/cli/table.h"

namespace shoal::cli {

OutputMode DetectOutputMode(int fd, bool json) {
  if (json) return OutputMode::kJson;
  if (isatty(fd) == 0) return OutputMode::kPlain;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return OutputMode::kPlain;
  return OutputMode::kTerminal;
}

int TerminalWidth(int fd, int fallback) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c != nullptr && std::atoi(c) > 0) {
    return std::atoi(c);
  }
  return fallback;
}

std::string RenderBar(double fraction, int width) {
  width = std::max(width, 3);
  const int inner = width - 2;
  if (!(fraction >= 0)) fraction = 0;  // NaN too
  fraction = std::min(fraction, 1.0);
  const int filled =
      fraction >= 1 ? inner : std::min(inner - 1, static_cast<int>(fraction * inner));
  std::string bar = "[";
  bar.append(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(inner - filled), '-');
  bar += ']';
  return bar;
}

std::string FormatPercent(double fraction) {
  if (!(fraction >= 0)) fraction = 0;
  const int pct = fraction >= 1 ? 100 : std::min(99, static_cast<int>(std::floor(fraction * 100)));
  char buf[16];
  std::snprintf(buf, sizeof buf, "%3d%%", pct);
  return buf;
}

std::string FormatEta(std::optional<double> seconds) {
  if (!seconds || !std::isfinite(*seconds) || *seconds < 0) return "-";
  if (*seconds == 0) return "0s";
  if (*seconds < 1) return "<1s";
  const auto s = static_cast<uint64_t>(std::llround(*seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else if (s < 100 * 3600) {
    std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s % 3600 / 60));
  } else {
    return ">99h";
  }
  return buf;
}

std::string FormatByteProgress(uint64_t done, int64_t total) {
  auto size = [](uint64_t b) {
    if (b < 1024) return std::to_string(b) + "B";
    static const char* kUnits[] = {"Ki", "Mi", "Gi", "Ti"};
    double v = static_cast<double>(b) / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
      v /= 1024;
      ++u;
    }
    return FormatFixed(v, 1) + kUnits[u];
  };
  if (total < 0) return size(done);
  return size(done) + "/" + size(static_cast<uint64_t>(total));
}

namespace {

constexpr const char* kClearToEol = "\x1b[K";
constexpr const char* kClearToEos = "\x1b[J";

std::string Cut(const std::string& line, int width) {
  const size_t max = static_cast<size_t>(std::max(width - 1, 1));
  return line.size() > max ? line.substr(0, max) : line;
}

}  // namespace

std::string TerminalBlock::Frame(const std::vector<std::string>& lines) {
  std::string out;
  if (drawn_ > 0) out += "\r\x1b[" + std::to_string(drawn_) + "A";
  for (const std::string& line : lines) {
    out += Cut(line, width_);
    out += kClearToEol;
    out += "\n";
  }
  // A shorter frame than the last: erase the rows the old one left below.
  if (lines.size() < drawn_) out += kClearToEos;
  drawn_ = lines.size();
  return out;
}

std::string RewriteLine(const std::string& line, int width) {
  std::string out = "\r";
  out += Cut(line, width);
  out += kClearToEol;
  return out;
}

std::string ClearLine() { return std::string("\r") + kClearToEol; }

namespace {

constexpr char kShowCursor[] = "\x1b[?25h";
constexpr char kHideCursor[] = "\x1b[?25l";
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
volatile sig_atomic_t g_cursor_fd = -1;
struct sigaction g_previous[3];

void RestoreAndDie(int sig) {
  if (g_cursor_fd >= 0) {
    (void)!write(g_cursor_fd, kShowCursor, sizeof kShowCursor - 1);
  }
  // Die of the signal itself, so a shell sees the interrupt for what it was.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

}  // namespace

TerminalSession::TerminalSession(int fd, OutputMode mode) {
  if (mode != OutputMode::kTerminal) return;
  active_ = true;
  std::fflush(stdout);
  g_cursor_fd = fd;
  struct sigaction sa {};
  sa.sa_handler = RestoreAndDie;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
  WriteAll(fd, kHideCursor);
}

TerminalSession::~TerminalSession() {
  if (!active_) return;
  WriteAll(g_cursor_fd, kShowCursor);
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_cursor_fd = -1;
}

void WriteAll(int fd, const std::string& bytes) {
  std::fflush(stdout);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal went away: nothing more to show
    done += static_cast<size_t>(n);
  }
}

}  // namespace shoal::cli
