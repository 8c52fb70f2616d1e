// A leaf aggregator's running weighted sum (LIFL's eager aggregation): every algorithm is
// Σ c_k x_k with a per-update coefficient c_k, so leaves fold updates as they arrive and the top
// merges the leaves' sums (Merge is associative and commutative up to float rounding) before
// the algorithm's final step. Δ-based algorithms (FedBuff, FedFix) also need Σ c_k per base
// version τ, because Σ c_k Δ_k = Σ c_k w_k − Σ_τ (Σ_{k:τ_k=τ} c_k) w_τ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::aggregator {

class FoldPool;

class PartialSum {
 public:
  PartialSum() = default;
  // Sizes the buffer up front so that even the first Fold does not allocate.
  explicit PartialSum(size_t num_params) : sum_(num_params, 0.0f) {}

  // sum += c * update; weight += c; weight_by_base[base_version] += c. An empty sum (count 0)
  // takes the size of its first update; later folds of another size are refused. c must be
  // finite.
  // Allocates only when the buffer or the base-version table grows; after Reset nothing does.
  Status Fold(std::span<const float> update, double c, uint64_t base_version);

  // this += other (both sums, weights, counts and per-base weights). Sizes must agree unless
  // one side is empty.
  Status Merge(const PartialSum& other);

  // this += a sum folded elsewhere (a leaf instance's float32 buffer in the shared-memory
  // pool) from the updates whose (base version, c_k) are listed in `folded`, every term scaled
  // by `scale` (AggregationAlgorithm::CommitScale: staleness taken at commit). With `threads`,
  // the addition is split across its threads (same result, bit for bit).
  Status MergeFolded(std::span<const float> sum,
                     std::span<const std::pair<uint64_t, double>> folded, double scale = 1.0,
                     FoldPool* threads = nullptr);

  // A sum folded elsewhere, for ResetToFolded: as MergeFolded's arguments.
  struct FoldedSum {
    std::span<const float> sum;
    std::span<const std::pair<uint64_t, double>> folded;
    double scale = 1.0;
  };
  // Reset, then MergeFolded of each of `sums` in order, with the additions done in one pass
  // (FoldPool::Sum with `threads`: each chunk of this sum zeroed and every leaf's added while it
  // is in cache, so it is written once instead of zeroed and then read and written per leaf).
  // The same bits, weights, counts and per-base weights as Reset and MergeFolded one by one. A
  // sum that MergeFolded would refuse (a non-finite scale, another size) is left out and the
  // first such refusal returned; the others are merged.
  Status ResetToFolded(std::span<const FoldedSum> sums, FoldPool* threads = nullptr);

  // Back to zero, keeping the buffers' capacity and size (no allocation on the next round).
  void Reset();

  size_t count() const { return count_; }    // updates folded in (merged counts add)
  double weight() const { return weight_; }  // Σ c_k
  size_t size() const { return sum_.size(); }
  std::span<const float> sum() const { return sum_; }  // Σ c_k x_k
  // (τ, Σ_{k:τ_k=τ} c_k), one entry per base version seen, in first-seen order.
  std::span<const std::pair<uint64_t, double>> weight_by_base() const { return by_base_; }

 private:
  std::vector<float> sum_;
  std::vector<std::pair<uint64_t, double>> by_base_;
  double weight_ = 0.0;
  size_t count_ = 0;
};

// acc[i] += w * x[i]: the vectorised kernel (shoal/fl/kernels' Fold on float32).
void FoldInto(float* acc, const float* x, size_t n, float w);

}  // namespace shoal::aggregator
