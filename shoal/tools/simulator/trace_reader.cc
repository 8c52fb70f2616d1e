// Trace readers: per-invocation CSV and Azure Functions 2019 per-minute counts. Outside input,
// so every malformed line is a Status naming the line, never an exception.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "shoal/common/file_io.h"
#include "shoal/tools/simulator/distribution.h"
#include "shoal/tools/simulator/workloads.h"

namespace shoal {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitCommas(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t c = line.find(',', start);
    out.push_back(Trim(line.substr(start, c == std::string_view::npos ? c : c - start)));
    if (c == std::string_view::npos) break;
    start = c + 1;
  }
  return out;
}

bool ParseDouble(std::string_view s, double& v) {
  if (s.empty()) return false;
  // from_chars for double is in GCC 12's libstdc++; strtod would depend on the locale.
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v);
}

bool ParseCount(std::string_view s, uint64_t& v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Calls fn(line_number, line) for each line (1-based, CR stripped); stops at the first error.
template <typename Fn>
Status ForEachLine(std::string_view text, Fn fn) {
  size_t lineno = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    SHOAL_RETURN_IF_ERROR(fn(++lineno, line));
  }
  return Status::Ok();
}

std::string At(size_t lineno) { return "line " + std::to_string(lineno) + ": "; }

uint32_t Intern(Trace& trace, std::unordered_map<std::string, uint32_t>& ids, std::string_view name,
                std::string_view trigger) {
  auto [it, inserted] = ids.try_emplace(std::string(name), static_cast<uint32_t>(ids.size()));
  if (inserted) {
    trace.functions.emplace_back(name);
    trace.triggers.emplace_back(trigger);
  }
  return it->second;
}

}  // namespace

Result<Trace> ParseInvocationCsv(std::string_view text) {
  Trace trace;
  std::unordered_map<std::string, uint32_t> ids;
  bool header = false;
  Status st = ForEachLine(text, [&](size_t n, std::string_view line) -> Status {
    if (Trim(line).empty()) return Status::Ok();
    auto f = SplitCommas(line);
    if (!header) {
      if (f.size() != 3 || !IEquals(f[0], "timestamp") || !IEquals(f[1], "function") ||
          !IEquals(f[2], "duration")) {
        return InvalidArgument(At(n) + "expected the header 'timestamp,function,duration'");
      }
      header = true;
      return Status::Ok();
    }
    if (f.size() != 3) {
      return InvalidArgument(At(n) + "expected 3 fields (timestamp,function,duration), got " +
                             std::to_string(f.size()));
    }
    Arrival a;
    if (!ParseDouble(f[0], a.t) || a.t < 0) {
      return InvalidArgument(At(n) + "timestamp '" + std::string(f[0]) +
                             "' is not a non-negative number of seconds");
    }
    if (f[1].empty()) return InvalidArgument(At(n) + "empty function name");
    if (!f[2].empty() && (!ParseDouble(f[2], a.service_s) || a.service_s < 0)) {
      return InvalidArgument(At(n) + "duration '" + std::string(f[2]) +
                             "' is not a non-negative number of seconds");
    }
    a.function = Intern(trace, ids, f[1], "");
    trace.arrivals.push_back(a);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!header)
    return InvalidArgument("line 1: empty trace (no 'timestamp,function,duration' header)");
  std::stable_sort(trace.arrivals.begin(), trace.arrivals.end(),
                   [](const Arrival& x, const Arrival& y) { return x.t < y.t; });
  return trace;
}

Result<Trace> ParseAzureFunctionsCounts(std::string_view text, uint64_t seed) {
  Trace trace;
  std::unordered_map<std::string, uint32_t> ids;
  std::mt19937_64 rng(seed);
  size_t minutes = 0;
  Status st = ForEachLine(text, [&](size_t n, std::string_view line) -> Status {
    if (Trim(line).empty()) return Status::Ok();
    auto f = SplitCommas(line);
    if (minutes == 0) {
      static constexpr std::string_view kCols[] = {"HashOwner", "HashApp", "HashFunction",
                                                   "Trigger"};
      if (f.size() < 5) {
        return InvalidArgument(At(n) +
                               "expected the header 'HashOwner,HashApp,HashFunction,"
                               "Trigger,1,...,1440'");
      }
      for (size_t i = 0; i < 4; ++i) {
        if (!IEquals(f[i], kCols[i])) {
          return InvalidArgument(At(n) + "header column " + std::to_string(i + 1) + " is '" +
                                 std::string(f[i]) + "', expected '" + std::string(kCols[i]) + "'");
        }
      }
      for (size_t i = 4; i < f.size(); ++i) {
        uint64_t m = 0;
        if (!ParseCount(f[i], m) || m != i - 3) {
          return InvalidArgument(At(n) + "header column " + std::to_string(i + 1) + " is '" +
                                 std::string(f[i]) + "', expected minute " + std::to_string(i - 3));
        }
      }
      minutes = f.size() - 4;
      return Status::Ok();
    }
    if (f.size() != minutes + 4) {
      return InvalidArgument(At(n) + "expected " + std::to_string(minutes + 4) + " fields, got " +
                             std::to_string(f.size()));
    }
    if (f[2].empty()) return InvalidArgument(At(n) + "empty HashFunction");
    const uint32_t fn = Intern(trace, ids, f[2], f[3]);
    for (size_t m = 0; m < minutes; ++m) {
      uint64_t count = 0;
      if (!ParseCount(f[m + 4], count)) {
        return InvalidArgument(At(n) + "minute " + std::to_string(m + 1) + " count '" +
                               std::string(f[m + 4]) + "' is not a non-negative integer");
      }
      if (count > 100'000'000) {
        return InvalidArgument(At(n) + "minute " + std::to_string(m + 1) + " count " +
                               std::to_string(count) + " is implausibly large");
      }
      for (uint64_t k = 0; k < count; ++k) {
        trace.arrivals.push_back({60.0 * (m + UniformUnit(rng)), fn, -1});
      }
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (minutes == 0) return InvalidArgument("line 1: empty trace (no Azure Functions header)");
  std::stable_sort(trace.arrivals.begin(), trace.arrivals.end(),
                   [](const Arrival& x, const Arrival& y) { return x.t < y.t; });
  return trace;
}

Result<Trace> ReadTraceFile(const std::string& path, uint64_t seed) {
  const std::optional<std::string> bytes = ReadFileBytes(path);
  if (!bytes) return NotFound("cannot open trace " + path);
  const std::string& text = *bytes;
  std::string_view first = text;
  first = first.substr(0, first.find('\n'));
  Result<Trace> r = first.rfind("HashOwner", 0) == 0 || first.rfind("hashowner", 0) == 0
                        ? ParseAzureFunctionsCounts(text, seed)
                        : ParseInvocationCsv(text);
  if (!r.ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

}  // namespace shoal
