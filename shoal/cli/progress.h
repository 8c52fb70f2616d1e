// Live progress in the terminal for the `shoal` CLI: a bar, ETA and byte formats, a block of
// lines redrawn in place, and the choice between drawing (a terminal) and plain lines (a pipe,
// a file, `-o json`), so that scripts never see escape codes or carriage returns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shoal::cli {

enum class OutputMode {
  kTerminal,  // redraw in place with ANSI escapes
  kPlain,     // one plain line per update (or only the final line), no escapes, no '\r'
  kJson,      // one JSON object per update line
};

// kJson when asked for; kTerminal when `fd` is a terminal whose $TERM is not "dumb"; else kPlain.
OutputMode DetectOutputMode(int fd, bool json);
// The terminal's columns (TIOCGWINSZ, then $COLUMNS), or `fallback`.
int TerminalWidth(int fd, int fallback = 80);

// "[#####-----]": exactly `width` characters (at least 3), `fraction` clamped to [0, 1]; the
// bar is full only at 1.
std::string RenderBar(double fraction, int width);
// "  0%" .. "100%" (4 characters): rounded down, so only a finished thing reads 100%.
std::string FormatPercent(double fraction);
// Time left: "-" (unknown), "0s", "<1s", "42s", "3m05s", "2h07m", ">99h".
std::string FormatEta(std::optional<double> seconds);
// "12.0Mi/45.5Mi", or "12.0Mi" when the total is unknown (< 0).
std::string FormatByteProgress(uint64_t done, int64_t total);

// A block of lines redrawn in place: each frame moves the cursor back up over the previous
// block, rewrites every line (each cleared to its end) and clears what is left below, so the
// cursor always rests at the start of the line under the block. Lines are cut to `width` - 1
// columns: a line that wrapped would take two rows and break the count.
class TerminalBlock {
 public:
  explicit TerminalBlock(int width) : width_(width) {}
  // The bytes that replace the previous frame with `lines`.
  std::string Frame(const std::vector<std::string>& lines);
  void set_width(int width) { width_ = width; }

 private:
  int width_;
  size_t drawn_ = 0;  // lines of the previous frame
};

// One line redrawn in place ("\r" + line + clear to its end); Clear() erases it, for a final
// line to take its place.
std::string RewriteLine(const std::string& line, int width);
std::string ClearLine();

// While alive on a terminal: the cursor is hidden, and SIGINT, SIGTERM and SIGHUP show it
// again before the process dies of the signal, so Ctrl-C leaves the terminal as it was. Does
// nothing for other modes.
class TerminalSession {
 public:
  TerminalSession(int fd, OutputMode mode);
  ~TerminalSession();
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

 private:
  bool active_ = false;
};

// Writes all of `bytes` to `fd` (stdout's buffer flushed first), retrying short writes: a
// frame goes out whole, in as few write(2)s as the kernel takes.
void WriteAll(int fd, const std::string& bytes);

}  // namespace shoal::cli
