// Internal to shoal_fl_robust: the per-block kernels the rules run on each thread, over a block
// of coordinates that has been transposed into scratch (row i: update i's values there, rows
// padded with zeros to a multiple of 8 lanes). An AVX2 and a portable build of each, chosen with
// the fold's ActiveIsa().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shoal::aggregator::internal {

// Batcher's odd-even merge sort for n values, with the comparators that only touch padding
// (indices >= n, which would hold +inf) left out: (lo, hi) pairs, lo < hi. first_run > 1 leaves
// out the stages that merge runs shorter than first_run (a power of two): for the rest, each
// aligned group of first_run values must already be sorted.
std::vector<uint16_t> SortingNetwork(size_t n, size_t first_run = 1);

// OrderStatsBlock sorts aligned groups of this many rows itself; give it SortingNetwork(n, it).
constexpr size_t kPresortedRun = 16;

struct OrderStatsArgs {
  const float* rows = nullptr;  // n rows of `stride` floats, 32-byte aligned
  size_t stride = 0;            // multiple of 8
  size_t n = 0;
  size_t len = 0;                   // valid coordinates in the block (<= stride)
  const uint16_t* pairs = nullptr;  // SortingNetwork(n, kPresortedRun)
  size_t num_pairs = 0;
  size_t k = 0;                // kept range: sorted[k] .. sorted[n-1-k]
  bool median = false;         // out = middle value(s) rather than the kept range's mean
  float* out = nullptr;        // len values
  float* sort_tmp = nullptr;   // (n + 16) * 8 floats, 32-byte aligned
  float* count_tmp = nullptr;  // n * 8 floats, 32-byte aligned
  uint64_t* kept = nullptr;    // n counters, += coordinates at which update i was kept
};
void OrderStatsBlock(const OrderStatsArgs& a);

// kDistances: for every pair i < j, partial[i * n + j] += sum over the block of
// (row_i - row_j)^2; kGram: for i <= j, += row_i * row_j; kNorms: the diagonal of kGram only.
// Each block sum is taken in float lanes in a fixed order, then added in double.
enum class PairMode { kDistances, kGram, kNorms };
void PairBlock(const float* rows, size_t stride, size_t len, size_t n, PairMode mode,
               double* partial);  // len: a multiple of 8 (rows zero padded)

}  // namespace shoal::aggregator::internal
