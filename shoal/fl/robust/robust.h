// Robust aggregation: combines the individual updates of a round so that a few poisoned clients
// cannot steer the model (coordinate-wise median, trimmed mean, multi-Krum, norm clipping and the
// Flag Aggregator). Unlike the fold, these need every update at once, so they read the updates
// where they sit (zero copy, f32/bf16/f16) and are vectorised and threaded like FoldPool.
//
// FL jobs select a rule with `spec.aggregation.robust`: the coordinator runs it at commit over
// the round's updates where they sit in the job's pool (shoal/fl/coordinator/robust_commit.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/kernels/fold.h"

namespace shoal::aggregator {

class FoldPool;

// A run of elements of one update: n elements of dtype at data.
struct UpdatePart {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  size_t n = 0;
};

// One update, read in place: n elements of dtype at data (no alignment needed), or, when parts
// is not empty, the parts end to end (their n add up to n; data and dtype are not read): a SHU1
// update's tensors where they sit in its body, each in its own dtype.
struct UpdateRef {
  UpdateRef() = default;
  UpdateRef(const void* d, DType t, size_t count) : data(d), dtype(t), n(count) {}
  UpdateRef(std::span<const UpdatePart> p, size_t count) : n(count), parts(p) {}

  const void* data = nullptr;
  DType dtype = DType::kF32;
  size_t n = 0;
  std::span<const UpdatePart> parts;
};

struct RobustInput {
  std::span<const UpdateRef> updates;  // all of the same length
  // The global model the updates were trained from (f32, the updates' length). Set: the updates
  // are models and clipping, Krum distances and Flag's subspace work on the deltas x_i - reference
  // (distances do not change); the result is a model. Null: the updates are deltas already.
  const float* reference = nullptr;
  // Norm clipping before the rule (0: off): each delta x_i - reference is scaled by
  // c_i = min(1, clip_norm / ||x_i - reference||_2), on the fly (the updates stay untouched).
  float clip_norm = 0;
  // Clip to the median of the deltas' norms instead (clip_norm is then not read): a scaled-up
  // update is brought back to a typical length without knowing the length beforehand.
  bool clip_to_median_norm = false;
};

// Which updates a rule excluded or down-weighted, so callers can count suspects per client.
// weights[i] is in [0, 1], 1 meaning "used as a plain mean would":
//   median, trimmed mean: the fraction of coordinates at which x_i lay inside the kept range
//     [sorted[k], sorted[n-1-k]] (median: the middle value, or the two middle values for even n;
//     ties count as kept). Honest updates sit near (n - 2k) / n; extreme ones near 0.
//   multi-Krum: 1 selected, 0 not.
//   clipped mean: the clip scale c_i.
//   Flag: cos^2 of the angle between the (clipped) delta and the subspace found (its share that
//     the projection keeps); a zero delta gets 0.
// excluded: weight exactly 0. downweighted: 0 < weight < 1. clip_scale[i]: c_i (all 1 when
// clipping is off); clipped: the indices with c_i < 1.
struct RobustReport {
  std::vector<double> weights;
  std::vector<size_t> excluded;
  std::vector<size_t> downweighted;
  std::vector<double> clip_scale;
  std::vector<size_t> clipped;
  std::vector<double> krum_scores;  // multi-Krum only: each update's score
  int flag_iterations = 0;          // Flag only: IRLS iterations run
  double flag_objective = 0;        // Flag only: sum_i sin(angle_i) at the end
};

// The Flag Aggregator (Almasi et al., "Flag Aggregator: Scalable Distributed Training under
// Failures and Augmented Losses using Convex Optimization"): finds an r-dimensional subspace Y
// that the normalised deltas v_i = g_i / ||g_i|| lie close to, minimising sum_i sin(theta_i)
// where cos^2(theta_i) = ||Y^T v_i||^2 (the flag median), by iteratively reweighted least squares
// (FlagIRLS): given weights a_i, Y is the top-r left singular subspace of [a_1 v_1 ... a_n v_n];
// then a_i = (sin^2(theta_i) + eps)^(-1/4), so that sum_i a_i^2 ||(I - YY^T) v_i||^2 is the IRLS
// surrogate of sum_i sin(theta_i). The aggregate is the projection of the updates' mean onto Y:
// reference + Y Y^T (1/n) sum_i g_i. (The public GAR code returns sum_i Y Y^T v_i / r, the
// projections of the normalised gradients, so its step length is set by n / r and the learning
// rate; an FL delta's length carries the clients' progress, so we project the deltas themselves.
// That code also runs a fixed 1 to 4 iterations from a random start.)
//
// Ours works in the n-dimensional span of the updates: one threaded pass computes the Gram
// matrix g_i . g_j (double, in fixed coordinate blocks, so it does not depend on the thread
// count); each iteration is then an n x n symmetric eigenproblem (Jacobi), and the result is one
// weighted fold of the updates. Start: a_i = 1 (the plain flag mean; the reference code starts
// from a random Y). Stop: after max_iterations, or when the objective changes by at most
// tolerance between iterations.
struct FlagOptions {
  size_t rank = 1;           // r, the subspace dimension (1 <= r <= n)
  int max_iterations = 100;  // IRLS iterations at most
  double tolerance = 1e-10;  // stop when |objective - previous| <= tolerance
  double eps = 1e-7;         // keeps the weight of an update lying in Y finite
};

// Threads and scratch are created once; calls are serialised (one at a time). Results do not
// depend on the thread count: bit-identical for 1 and T threads.
class RobustAggregator {
 public:
  // threads == 0: std::thread::hardware_concurrency() (at least 1).
  explicit RobustAggregator(unsigned threads = 0);
  ~RobustAggregator();
  RobustAggregator(const RobustAggregator&) = delete;
  RobustAggregator& operator=(const RobustAggregator&) = delete;

  unsigned threads() const;

  // Every call writes the result (f32, the updates' length) to out and returns the report, or
  // InvalidArgument with a message naming the bad parameter. Inputs must be finite (check them
  // as the fold does, with AllFinite, before they get here).

  // out[j] = median_i x_i[j] (the mean of the two middle values for even n).
  Result<RobustReport> Median(const RobustInput& in, float* out);
  // out[j] = mean of sorted_i x_i[j] without the k = floor(beta * n) smallest and k largest;
  // 0 <= beta < 0.5.
  Result<RobustReport> TrimmedMean(const RobustInput& in, double beta, float* out);
  // Multi-Krum (Blanchard et al. 2017): score_i = sum of the squared distances from x_i to its
  // n - f - 2 nearest other updates; out = mean of the m updates with the lowest scores (ties:
  // lower index). Needs n > 2f + 2 and 1 <= m <= n - f; m = 0 means n - f.
  Result<RobustReport> MultiKrum(const RobustInput& in, size_t f, size_t m, float* out);
  // The mean of the clipped updates (needs in.clip_norm > 0 or in.clip_to_median_norm).
  Result<RobustReport> ClippedMean(const RobustInput& in, float* out);
  Result<RobustReport> Flag(const RobustInput& in, const FlagOptions& options, float* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::aggregator
