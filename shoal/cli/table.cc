#include "shoal/cli/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shoal::cli {

Table::Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void Table::AddRow(std::vector<std::string> row) {
  row.resize(rows_[0].size());
  rows_.push_back(std::move(row));
}

std::string Table::Render() const {
  std::vector<size_t> width(rows_[0].size(), 0);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string FormatFixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string FormatAge(double seconds) {
  if (seconds < 0) seconds = 0;
  const auto s = static_cast<uint64_t>(seconds);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 2 * 3600) return std::to_string(s / 60) + "m";
  if (s < 2 * 86400) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string FormatSeconds(double seconds) {
  auto trim = [](std::string s) {
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s;
  };
  if (seconds < 1) return trim(FormatFixed(seconds * 1000, 1)) + "ms";
  if (seconds < 120 || std::fmod(seconds, 60) != 0) return trim(FormatFixed(seconds, 3)) + "s";
  if (seconds < 7200 || std::fmod(seconds, 3600) != 0)
    return trim(FormatFixed(seconds / 60, 0)) + "m";
  return trim(FormatFixed(seconds / 3600, 0)) + "h";
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "Ki", "Mi", "Gi", "Ti"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + "B";
  std::string s = FormatFixed(v, v == std::floor(v) ? 0 : 1);
  return s + kUnits[u];
}

std::string FormatMs(double ms) {
  if (ms <= 0) return "-";
  return FormatFixed(ms, ms < 10 ? 2 : 1) + "ms";
}

}  // namespace shoal::cli
