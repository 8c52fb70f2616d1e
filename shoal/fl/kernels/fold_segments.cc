#include "shoal/fl/kernels/fold_segments.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace shoal::aggregator {
namespace {

struct Range {
  uintptr_t begin = 0, end = 0;
  size_t segment = 0;
  bool acc = false;  // an accumulator range (written), or an update range (read)
};

std::string Name(const Range& r) {
  return std::string(r.acc ? "accumulator" : "update") + " of segment " + std::to_string(r.segment);
}

}  // namespace

Status CheckFoldSegments(std::span<const FoldSegment> segments) {
  std::vector<Range> ranges;
  ranges.reserve(segments.size() * 2);
  for (size_t i = 0; i < segments.size(); ++i) {
    const FoldSegment& s = segments[i];
    if (s.n == 0) continue;
    const auto acc = reinterpret_cast<uintptr_t>(s.acc);
    const auto x = reinterpret_cast<uintptr_t>(s.x);
    ranges.push_back({acc, acc + s.n * sizeof(float), i, true});
    ranges.push_back({x, x + TensorBytes(s.dtype, s.n), i, false});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  // Sweep in address order, keeping the furthest-reaching accumulator range and update range
  // seen so far: a range that starts before either ends overlaps it. Two update ranges may.
  const Range* acc_reach = nullptr;
  const Range* x_reach = nullptr;
  for (const Range& r : ranges) {
    const Range* hit = nullptr;
    if (acc_reach != nullptr && r.begin < acc_reach->end) {
      hit = acc_reach;
    } else if (r.acc && x_reach != nullptr && r.begin < x_reach->end) {
      hit = x_reach;
    }
    if (hit != nullptr) {
      return InvalidArgument("fold segments overlap: the " + Name(*hit) + " and the " + Name(r) +
                             " share bytes (a folder that pipelines segments needs disjoint "
                             "accumulators, and no update inside an accumulator)");
    }
    const Range*& reach = r.acc ? acc_reach : x_reach;
    if (reach == nullptr || r.end > reach->end) reach = &r;
  }
  return {};
}

void FoldSegments(std::span<const FoldSegment> segments) {
  for (const FoldSegment& s : segments) Fold(s.acc, s.x, s.dtype, s.n, s.w);
}

}  // namespace shoal::aggregator
