// Column-aligned text tables and the short human formats (ages, sizes) that `shoal get`,
// `describe` and `top` print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  // Left-aligned columns, three spaces apart, no trailing spaces; one line per row.
  std::string Render() const;
  size_t rows() const { return rows_.size() - 1; }

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

std::string FormatAge(double seconds);      // 42s, 5m, 3h, 2d
std::string FormatSeconds(double seconds);  // 250ms, 30s, 1.5s, 2m, 1h
std::string FormatBytes(uint64_t bytes);    // 512B, 64Ki, 128Mi, 1.5Gi
std::string FormatFixed(double value, int decimals);
std::string FormatMs(double ms);  // "-" when 0, else "1.2ms"

}  // namespace shoal::cli
