#include "shoal/fl/robust/robust.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <numeric>
#include <string>

#include "shoal/fl/kernels/fold_pool.h"
#include "shoal/fl/robust/robust_kernels.h"
#include "shoal/fl/robust/task_pool.h"

namespace shoal::aggregator {
namespace {

// Coordinates per transposed block: n rows of this many f32 stay in L2 (64 updates: 128 KB).
constexpr size_t kBlock = 512;
// Scratch rows are this far apart: 64 bytes more than the block, so the rows that a group of
// coordinates reads fall in different L1 sets (a 2 KB stride puts 64 rows in 2 sets).
constexpr size_t kRowStride = kBlock + 16;
// Pairwise sums (Krum distances, Flag's Gram matrix, norms) are reduced over this many fixed
// coordinate ranges, each summed by one thread in order, then added in range order: the result
// does not depend on which thread ran which range.
constexpr size_t kPairRanges = 64;
// Order statistics: contiguous blocks per task, so one thread streams through each update.
constexpr size_t kBlocksPerTask = 16;
constexpr size_t kMaxUpdates = 65535;  // sorting-network indices are 16-bit

struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;

AlignedFloats AllocAligned(size_t count) {
  return AlignedFloats(
      static_cast<float*>(::operator new[](count * sizeof(float), std::align_val_t{64})));
}

void FillReport(RobustReport& r) {
  for (size_t i = 0; i < r.weights.size(); ++i) {
    if (r.weights[i] == 0) {
      r.excluded.push_back(i);
    } else if (r.weights[i] < 1) {
      r.downweighted.push_back(i);
    }
  }
  for (size_t i = 0; i < r.clip_scale.size(); ++i) {
    if (r.clip_scale[i] < 1) r.clipped.push_back(i);
  }
}

// Eigen-decomposition of a symmetric p x p matrix (row-major, overwritten) by cyclic Jacobi
// rotations: eigenvalues in values, eigenvectors in the columns of vectors.
void SymmetricEigen(std::vector<double>& a, size_t p, std::vector<double>& values,
                    std::vector<double>& vectors) {
  vectors.assign(p * p, 0.0);
  for (size_t i = 0; i < p; ++i) vectors[i * p + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (size_t i = 0; i < p; ++i) {
      diag += a[i * p + i] * a[i * p + i];
      for (size_t j = i + 1; j < p; ++j) off += a[i * p + j] * a[i * p + j];
    }
    if (off <= 1e-30 * diag || off == 0) break;
    for (size_t q = 0; q < p; ++q) {
      for (size_t r = q + 1; r < p; ++r) {
        const double apq = a[q * p + r];
        if (apq == 0) continue;
        const double theta = (a[r * p + r] - a[q * p + q]) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < p; ++k) {  // columns q, r
          const double akq = a[k * p + q], akr = a[k * p + r];
          a[k * p + q] = c * akq - s * akr;
          a[k * p + r] = s * akq + c * akr;
        }
        for (size_t k = 0; k < p; ++k) {  // rows q, r
          const double aqk = a[q * p + k], ark = a[r * p + k];
          a[q * p + k] = c * aqk - s * ark;
          a[r * p + k] = s * aqk + c * ark;
        }
        for (size_t k = 0; k < p; ++k) {
          const double vkq = vectors[k * p + q], vkr = vectors[k * p + r];
          vectors[k * p + q] = c * vkq - s * vkr;
          vectors[k * p + r] = s * vkq + c * vkr;
        }
      }
    }
  }
  values.resize(p);
  for (size_t i = 0; i < p; ++i) values[i] = a[i * p + i];
}

}  // namespace

static bool Clipping(const RobustInput& in) { return in.clip_norm > 0 || in.clip_to_median_norm; }

struct RobustAggregator::Impl {
  explicit Impl(unsigned threads) : pool(threads), fold(pool.threads()) {
    scratch.resize(pool.threads());
  }

  struct Scratch {
    AlignedFloats rows, sort_tmp, count_tmp;
    size_t rows_cap = 0, n_cap = 0;
  };

  std::mutex call_mu;  // serialises calls: the pool and the scratch serve one at a time
  // Per update given in parts: where each part starts (coordinates), set by Prepare.
  std::vector<std::vector<size_t>> part_starts;

  void Prepare(const RobustInput& in) {
    part_starts.resize(in.updates.size());
    for (size_t i = 0; i < in.updates.size(); ++i) {
      std::vector<size_t>& st = part_starts[i];
      st.clear();
      size_t at = 0;
      for (const UpdatePart& p : in.updates[i].parts) {
        st.push_back(at);
        at += p.n;
      }
    }
  }

  // Calls f(part, offset in the part, dst offset, count) for each run of coordinates
  // [begin, begin + len) of update i.
  template <typename F>
  void ForRange(const RobustInput& in, size_t i, size_t begin, size_t len, F&& f) const {
    const UpdateRef& u = in.updates[i];
    if (u.parts.empty()) {
      f(UpdatePart{u.data, u.dtype, u.n}, begin, size_t{0}, len);
      return;
    }
    const std::vector<size_t>& st = part_starts[i];
    size_t p = static_cast<size_t>(std::upper_bound(st.begin(), st.end(), begin) - st.begin()) - 1;
    size_t done = 0;
    while (done < len && p < st.size()) {
      const size_t at = begin + done - st[p];
      const size_t take = std::min(len - done, u.parts[p].n - at);
      if (take > 0) f(u.parts[p], at, done, take);
      done += take;
      ++p;
    }
  }
  internal::TaskPool pool;
  FoldPool fold;
  std::vector<Scratch> scratch;

  Scratch& ScratchFor(unsigned thread, size_t n) {
    Scratch& s = scratch[thread];
    if (s.n_cap < n) {
      s.rows = AllocAligned(n * kRowStride);
      s.sort_tmp = AllocAligned((n + 16) * 8);
      s.count_tmp = AllocAligned(n * 8);
      s.n_cap = n;
    }
    return s;
  }

  // Asks for the next block's lines of every update while this one is computed: 64 updates are
  // 64 streams, more than the hardware prefetchers follow.
  void Prefetch(const RobustInput& in, size_t begin, size_t len) const {
    for (size_t i = 0; i < in.updates.size(); ++i) {
      ForRange(in, i, begin, len, [](const UpdatePart& u, size_t at, size_t, size_t count) {
        const size_t size = DTypeSize(u.dtype);
        const char* p = static_cast<const char*>(u.data) + at * size;
        for (size_t off = 0; off < count * size; off += 64) __builtin_prefetch(p + off);
      });
    }
    if (in.reference) {
      for (size_t off = 0; off < len; off += 16) __builtin_prefetch(in.reference + begin + off);
    }
  }

  // Transposes coordinates [begin, begin + len) of every update into rows (stride kBlock, zero
  // padded). values: ref + c_i (x_i - ref) (what the order statistics see); otherwise the delta
  // c_i (x_i - ref), with ref taken off only when subtract_ref.
  void LoadRows(const RobustInput& in, const std::vector<double>& scale, size_t begin, size_t len,
                bool values, bool subtract_ref, float* rows) {
    const size_t n = in.updates.size();
    const float* ref = in.reference ? in.reference + begin : nullptr;
    for (size_t i = 0; i < n; ++i) {
      float* row = rows + i * kRowStride;
      ForRange(in, i, begin, len, [row](const UpdatePart& u, size_t at, size_t dst, size_t count) {
        ConvertToF32(row + dst, static_cast<const char*>(u.data) + at * DTypeSize(u.dtype), u.dtype,
                     count);
      });
      std::fill(row + len, row + kBlock, 0.0f);
      const auto c = static_cast<float>(scale[i]);
      if (values) {
        if (c == 1.0f) continue;
        if (ref) {
          for (size_t j = 0; j < len; ++j) row[j] = ref[j] + c * (row[j] - ref[j]);
        } else {
          for (size_t j = 0; j < len; ++j) row[j] *= c;
        }
      } else {
        if (ref && subtract_ref) {
          for (size_t j = 0; j < len; ++j) row[j] -= ref[j];
        }
        if (c != 1.0f) {
          for (size_t j = 0; j < len; ++j) row[j] *= c;
        }
      }
    }
  }

  // Sums over all coordinates, per pair (i <= j for gram, i < j otherwise): the n x n matrix of
  // dot products or squared distances of the deltas c_i (x_i - ref) (row-major, upper triangle
  // filled and mirrored).
  std::vector<double> PairSums(const RobustInput& in, const std::vector<double>& scale,
                               internal::PairMode mode, bool subtract_ref) {
    const size_t n = in.updates.size(), d = in.updates[0].n;
    const size_t blocks = (d + kBlock - 1) / kBlock;
    const size_t ranges = std::max<size_t>(1, std::min(kPairRanges, blocks));
    std::vector<double> partial(ranges * n * n, 0.0);
    pool.Run(ranges, [&](size_t r, unsigned thread) {
      Scratch& s = ScratchFor(thread, n);
      const size_t b0 = r * blocks / ranges, b1 = (r + 1) * blocks / ranges;
      for (size_t b = b0; b < b1; ++b) {
        const size_t begin = b * kBlock, len = std::min(kBlock, d - begin);
        if (b + 1 < b1) Prefetch(in, (b + 1) * kBlock, std::min(kBlock, d - (b + 1) * kBlock));
        LoadRows(in, scale, begin, len, /*values=*/false, subtract_ref, s.rows.get());
        internal::PairBlock(s.rows.get(), kRowStride, kBlock, n, mode, partial.data() + r * n * n);
      }
    });
    std::vector<double> m(n * n, 0.0);
    for (size_t r = 0; r < ranges; ++r) {
      for (size_t k = 0; k < n * n; ++k) m[k] += partial[r * n * n + k];
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < i; ++j) m[i * n + j] = m[j * n + i];
    }
    return m;
  }

  // c_i = min(1, tau / ||x_i - ref||), all 1 when clipping is off; tau is clip_norm, or the
  // median of the norms (clip_to_median_norm).
  std::vector<double> ClipScales(const RobustInput& in) {
    const size_t n = in.updates.size();
    std::vector<double> ones(n, 1.0);
    if (!Clipping(in)) return ones;
    // The diagonal of the Gram matrix; the pairs cost little next to reading the updates at
    // ResNet sizes, and sharing the kernel keeps one code path.
    const std::vector<double> g = PairSums(in, ones, internal::PairMode::kNorms, true);
    std::vector<double> c(n), norms(n);
    for (size_t i = 0; i < n; ++i) norms[i] = std::sqrt(g[i * n + i]);
    double tau = in.clip_norm;
    if (in.clip_to_median_norm) {
      std::vector<double> sorted = norms;
      std::sort(sorted.begin(), sorted.end());
      tau = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
    for (size_t i = 0; i < n; ++i) c[i] = norms[i] > tau ? tau / norms[i] : 1.0;
    return c;
  }

  // out = sum_i w_i x_i (+ w_ref ref), through the fold.
  void WeightedSum(const RobustInput& in, const std::vector<double>& w, double w_ref, float* out) {
    const size_t d = in.updates[0].n;
    std::fill(out, out + d, 0.0f);
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) continue;
      ForRange(in, i, 0, d, [&](const UpdatePart& u, size_t at, size_t dst, size_t count) {
        fold.Fold(out + dst, static_cast<const char*>(u.data) + at * DTypeSize(u.dtype), u.dtype,
                  count, static_cast<float>(w[i]));
      });
    }
    if (in.reference && w_ref != 0) {
      fold.Fold(out, in.reference, DType::kF32, d, static_cast<float>(w_ref));
    }
  }

  Result<RobustReport> OrderStats(const RobustInput& in, size_t k, bool median, float* out) {
    const size_t n = in.updates.size(), d = in.updates[0].n;
    RobustReport report;
    report.clip_scale = ClipScales(in);
    const std::vector<uint16_t> net = internal::SortingNetwork(n, internal::kPresortedRun);
    const size_t blocks = (d + kBlock - 1) / kBlock;
    const size_t tasks = (blocks + kBlocksPerTask - 1) / kBlocksPerTask;
    std::vector<std::vector<uint64_t>> kept(pool.threads(), std::vector<uint64_t>(n, 0));
    pool.Run(tasks, [&](size_t task, unsigned thread) {
      Scratch& s = ScratchFor(thread, n);
      const size_t b_end = std::min(blocks, (task + 1) * kBlocksPerTask);
      for (size_t b = task * kBlocksPerTask; b < b_end; ++b) {
        const size_t begin = b * kBlock, len = std::min(kBlock, d - begin);
        if (b + 1 < b_end) Prefetch(in, (b + 1) * kBlock, std::min(kBlock, d - (b + 1) * kBlock));
        LoadRows(in, report.clip_scale, begin, len, /*values=*/true, false, s.rows.get());
        internal::OrderStatsArgs a;
        a.rows = s.rows.get();
        a.stride = kRowStride;
        a.n = n;
        a.len = len;
        a.pairs = net.data();
        a.num_pairs = net.size() / 2;
        a.k = k;
        a.median = median;
        a.out = out + begin;
        a.sort_tmp = s.sort_tmp.get();
        a.count_tmp = s.count_tmp.get();
        a.kept = kept[thread].data();
        internal::OrderStatsBlock(a);
      }
    });
    report.weights.assign(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      uint64_t total = 0;
      for (const auto& t : kept) total += t[i];
      report.weights[i] = d == 0 ? 1.0 : static_cast<double>(total) / static_cast<double>(d);
    }
    FillReport(report);
    return report;
  }
};

namespace {

Status Validate(const RobustInput& in, const char* rule) {
  const std::string r = rule;
  if (in.updates.empty()) return InvalidArgument(r + ": needs at least one update");
  if (in.updates.size() > kMaxUpdates) {
    return InvalidArgument(r + ": at most " + std::to_string(kMaxUpdates) + " updates, got " +
                           std::to_string(in.updates.size()));
  }
  const size_t d = in.updates[0].n;
  for (size_t i = 0; i < in.updates.size(); ++i) {
    if (in.updates[i].n != d) {
      return InvalidArgument(r + ": update " + std::to_string(i) + " has " +
                             std::to_string(in.updates[i].n) + " elements, update 0 has " +
                             std::to_string(d));
    }
    const UpdateRef& u = in.updates[i];
    if (u.parts.empty()) {
      if (d > 0 && u.data == nullptr) {
        return InvalidArgument(r + ": update " + std::to_string(i) + " has no data");
      }
      continue;
    }
    size_t total = 0;
    for (const UpdatePart& p : u.parts) {
      if (p.n > 0 && p.data == nullptr) {
        return InvalidArgument(r + ": a part of update " + std::to_string(i) + " has no data");
      }
      total += p.n;
    }
    if (total != d) {
      return InvalidArgument(r + ": the parts of update " + std::to_string(i) + " hold " +
                             std::to_string(total) + " elements, not its n = " + std::to_string(d));
    }
  }
  if (!std::isfinite(in.clip_norm) || in.clip_norm < 0) {
    return InvalidArgument(r + ": clip_norm must be finite and >= 0 (0: no clipping), got " +
                           std::to_string(in.clip_norm));
  }
  return Status::Ok();
}

}  // namespace

RobustAggregator::RobustAggregator(unsigned threads) : impl_(std::make_unique<Impl>(threads)) {}
RobustAggregator::~RobustAggregator() = default;
unsigned RobustAggregator::threads() const { return impl_->pool.threads(); }

Result<RobustReport> RobustAggregator::Median(const RobustInput& in, float* out) {
  std::lock_guard<std::mutex> lock(impl_->call_mu);
  SHOAL_RETURN_IF_ERROR(Validate(in, "median"));
  impl_->Prepare(in);
  const size_t n = in.updates.size();
  return impl_->OrderStats(in, (n - 1) / 2, /*median=*/true, out);
}

Result<RobustReport> RobustAggregator::TrimmedMean(const RobustInput& in, double beta, float* out) {
  std::lock_guard<std::mutex> lock(impl_->call_mu);
  SHOAL_RETURN_IF_ERROR(Validate(in, "trimmed mean"));
  impl_->Prepare(in);
  if (!(beta >= 0 && beta < 0.5)) {
    return InvalidArgument(
        "trimmed mean: beta (the fraction dropped at each end) must be in "
        "[0, 0.5), got " +
        std::to_string(beta));
  }
  const size_t n = in.updates.size();
  const auto k = static_cast<size_t>(std::floor(beta * static_cast<double>(n)));
  return impl_->OrderStats(in, k, /*median=*/false, out);
}

Result<RobustReport> RobustAggregator::MultiKrum(const RobustInput& in, size_t f, size_t m,
                                                 float* out) {
  std::lock_guard<std::mutex> lock(impl_->call_mu);
  SHOAL_RETURN_IF_ERROR(Validate(in, "multi-Krum"));
  impl_->Prepare(in);
  const size_t n = in.updates.size();
  if (n <= 2 * f + 2) {
    return InvalidArgument(
        "multi-Krum: " + std::to_string(n) + " updates cannot tolerate f = " + std::to_string(f) +
        " byzantine ones (needs n > 2f + 2 = " + std::to_string(2 * f + 2) + ")");
  }
  if (m == 0) m = n - f;
  if (m > n - f) {
    return InvalidArgument("multi-Krum: m = " + std::to_string(m) +
                           " selected updates is more than n - f = " + std::to_string(n - f));
  }
  RobustReport report;
  report.clip_scale = impl_->ClipScales(in);
  const bool clipping = Clipping(in);
  const std::vector<double> dist =
      impl_->PairSums(in, report.clip_scale, internal::PairMode::kDistances, clipping);
  const size_t nearest = n - f - 2;
  report.krum_scores.assign(n, 0.0);
  std::vector<double> row;
  for (size_t i = 0; i < n; ++i) {
    row.clear();
    for (size_t j = 0; j < n; ++j) {
      if (j != i) row.push_back(dist[i * n + j]);
    }
    std::sort(row.begin(), row.end());
    double s = 0;
    for (size_t j = 0; j < nearest; ++j) s += row[j];
    report.krum_scores[i] = s;
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return report.krum_scores[a] < report.krum_scores[b];
  });
  report.weights.assign(n, 0.0);
  std::vector<double> w(n, 0.0);
  double sum_w = 0;
  for (size_t s = 0; s < m; ++s) {
    const size_t i = order[s];
    report.weights[i] = 1;
    w[i] = report.clip_scale[i] / static_cast<double>(m);
    sum_w += w[i];
  }
  // mean of ref + c_i (x_i - ref) = sum (c_i / m) x_i + (1 - sum c_i / m) ref
  impl_->WeightedSum(in, w, 1.0 - sum_w, out);
  FillReport(report);
  return report;
}

Result<RobustReport> RobustAggregator::ClippedMean(const RobustInput& in, float* out) {
  std::lock_guard<std::mutex> lock(impl_->call_mu);
  SHOAL_RETURN_IF_ERROR(Validate(in, "clipped mean"));
  impl_->Prepare(in);
  if (!Clipping(in)) {
    return InvalidArgument("clipped mean: clip_norm must be > 0 (or clip_to_median_norm set)");
  }
  const size_t n = in.updates.size();
  RobustReport report;
  report.clip_scale = impl_->ClipScales(in);
  report.weights = report.clip_scale;
  std::vector<double> w(n);
  double sum_w = 0;
  for (size_t i = 0; i < n; ++i) {
    w[i] = report.clip_scale[i] / static_cast<double>(n);
    sum_w += w[i];
  }
  impl_->WeightedSum(in, w, 1.0 - sum_w, out);
  FillReport(report);
  return report;
}

Result<RobustReport> RobustAggregator::Flag(const RobustInput& in, const FlagOptions& opt,
                                            float* out) {
  std::lock_guard<std::mutex> lock(impl_->call_mu);
  SHOAL_RETURN_IF_ERROR(Validate(in, "Flag"));
  impl_->Prepare(in);
  const size_t n = in.updates.size();
  if (opt.rank < 1 || opt.rank > n) {
    return InvalidArgument("Flag: rank must be in [1, n = " + std::to_string(n) + "], got " +
                           std::to_string(opt.rank));
  }
  if (opt.max_iterations < 1) return InvalidArgument("Flag: max_iterations must be >= 1");
  if (!(opt.eps > 0) || !std::isfinite(opt.eps)) return InvalidArgument("Flag: eps must be > 0");
  if (!(opt.tolerance >= 0)) return InvalidArgument("Flag: tolerance must be >= 0");
  RobustReport report;
  report.clip_scale = impl_->ClipScales(in);
  // K_ij = g_i . g_j with g_i = c_i (x_i - ref).
  const std::vector<double> K =
      impl_->PairSums(in, report.clip_scale, internal::PairMode::kGram, /*subtract_ref=*/true);
  std::vector<double> norm(n), C(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) norm[i] = std::sqrt(std::max(0.0, K[i * n + i]));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (norm[i] > 0 && norm[j] > 0) C[i * n + j] = K[i * n + j] / (norm[i] * norm[j]);
    }
  }
  // Y = V A, V = [v_1 .. v_n]; with weights a, M = V diag(a), M^T M = D C D = U L U^T and the
  // top-r left singular vectors of M are Y = M U_r L_r^(-1/2), so A = D U_r L_r^(-1/2).
  std::vector<double> a(n), cos2(n, 0.0), A, values, vectors, work;
  for (size_t i = 0; i < n; ++i) a[i] = norm[i] > 0 ? 1.0 : 0.0;
  size_t r = 0;
  double prev = std::numeric_limits<double>::infinity(), obj = 0;
  int it = 0;
  for (it = 1; it <= opt.max_iterations; ++it) {
    work.assign(n * n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) work[i * n + j] = a[i] * C[i * n + j] * a[j];
    }
    SymmetricEigen(work, n, values, vectors);
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t x, size_t y) { return values[x] > values[y]; });
    const double top = values[idx[0]];
    r = 0;
    while (r < opt.rank && top > 0 && values[idx[r]] > 1e-12 * top) ++r;
    A.assign(n * r, 0.0);  // A[i * r + k]
    for (size_t k = 0; k < r; ++k) {
      const double inv = 1 / std::sqrt(values[idx[k]]);
      for (size_t i = 0; i < n; ++i) A[i * r + k] = a[i] * vectors[i * n + idx[k]] * inv;
    }
    // cos^2_i = ||Y^T v_i||^2 = ||A^T C e_i||^2
    obj = 0;
    for (size_t i = 0; i < n; ++i) {
      if (norm[i] == 0) {
        cos2[i] = 0;
        continue;
      }
      double c2 = 0;
      for (size_t k = 0; k < r; ++k) {
        double y = 0;
        for (size_t j = 0; j < n; ++j) y += A[j * r + k] * C[j * n + i];
        c2 += y * y;
      }
      cos2[i] = std::min(1.0, c2);
      obj += std::sqrt(std::max(0.0, 1 - c2));
    }
    if (std::fabs(obj - prev) <= opt.tolerance || it == opt.max_iterations) break;
    prev = obj;
    for (size_t i = 0; i < n; ++i) {
      a[i] = norm[i] > 0 ? std::pow(std::max(0.0, 1 - cos2[i]) + opt.eps, -0.25) : 0.0;
    }
  }
  report.flag_iterations = std::min(it, opt.max_iterations);
  report.flag_objective = obj;
  // out = ref + Y Y^T (1/n) sum_j g_j; Y^T mean = A^T b, b_i = (1/n) sum_j K_ij / ||g_i||;
  // Y y = sum_i (A y)_i g_i / ||g_i||, and g_i = c_i (x_i - ref).
  std::vector<double> b(n, 0.0), y(r, 0.0), w(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (norm[i] == 0) continue;
    double s = 0;
    for (size_t j = 0; j < n; ++j) s += K[i * n + j];
    b[i] = s / static_cast<double>(n) / norm[i];
  }
  for (size_t k = 0; k < r; ++k) {
    for (size_t i = 0; i < n; ++i) y[k] += A[i * r + k] * b[i];
  }
  double sum_w = 0;
  for (size_t i = 0; i < n; ++i) {
    if (norm[i] == 0) continue;
    double ay = 0;
    for (size_t k = 0; k < r; ++k) ay += A[i * r + k] * y[k];
    w[i] = ay * report.clip_scale[i] / norm[i];
    sum_w += w[i];
  }
  impl_->WeightedSum(in, w, 1.0 - sum_w, out);
  report.weights = cos2;
  FillReport(report);
  return report;
}

}  // namespace shoal::aggregator
