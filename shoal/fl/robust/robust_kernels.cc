#include "shoal/fl/robust/robust_kernels.h"

#include <cstring>
#include <limits>

#include "shoal/fl/kernels/fold.h"

// The 32-byte vector helpers below are always inlined, so no vector crosses a call boundary and
// the ABI note GCC gives for them on the portable build does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace shoal::aggregator::internal {
namespace {

using V8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));

[[gnu::always_inline]] inline V8 Load(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void Store(float* p, V8 v) { std::memcpy(p, &v, sizeof v); }

template <int W>
struct Lanes;
template <>
struct Lanes<8> {
  using F = V8;
  using I = I8;
};

// W lanes of coordinates at a time (8: the AVX2 and portable builds).
template <int W>
[[gnu::always_inline]] inline void Network(float* f, const uint16_t* pairs, size_t count);

// Batcher's network for 16 values, fully unrolled so the rows stay in registers (16 ymm: the
// compiler spills a few, still far fewer memory operations than the table-driven network).
template <typename V>
[[gnu::always_inline]] inline void Sort16(V* r) {
  constexpr uint8_t kPairs[63][2] = {
      {0, 1},   {2, 3},   {4, 5}, {6, 7},   {8, 9},   {10, 11}, {12, 13}, {14, 15}, {0, 2},
      {1, 3},   {4, 6},   {5, 7}, {8, 10},  {9, 11},  {12, 14}, {13, 15}, {1, 2},   {5, 6},
      {9, 10},  {13, 14}, {0, 4}, {1, 5},   {2, 6},   {3, 7},   {8, 12},  {9, 13},  {10, 14},
      {11, 15}, {2, 4},   {3, 5}, {10, 12}, {11, 13}, {1, 2},   {3, 4},   {5, 6},   {9, 10},
      {11, 12}, {13, 14}, {0, 8}, {1, 9},   {2, 10},  {3, 11},  {4, 12},  {5, 13},  {6, 14},
      {7, 15},  {4, 8},   {5, 9}, {6, 10},  {7, 11},  {2, 4},   {3, 5},   {6, 8},   {7, 9},
      {10, 12}, {11, 13}, {1, 2}, {3, 4},   {5, 6},   {7, 8},   {9, 10},  {11, 12}, {13, 14}};
#pragma GCC unroll 63
  for (const auto& p : kPairs) {
    const V x = r[p[0]], y = r[p[1]];
    r[p[0]] = x < y ? x : y;
    r[p[1]] = x > y ? x : y;
  }
}

template <int W>
[[gnu::always_inline]] inline void OrderStatsBody(const OrderStatsArgs& a) {
  using V = typename Lanes<W>::F;
  const size_t n = a.n;
  const size_t groups = (a.len + W - 1) / W;
  V* cnt = reinterpret_cast<V*>(a.count_tmp);
  for (size_t i = 0; i < n; ++i) cnt[i] = V{};
  V* t = reinterpret_cast<V*>(a.sort_tmp);
  const size_t lo_i = a.k, hi_i = n - 1 - a.k;
  auto load = [](const float* p) __attribute__((always_inline)) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  for (size_t g = 0; g < groups; ++g) {
    const size_t off = g * W;
    // Each aligned group of 16 rows is sorted in registers on its way into t (the network's
    // stages for runs shorter than 16 only compare rows within such a group); rows past n are
    // +inf, which stays past n. a.pairs holds the remaining stages.
    const V inf = V{} + std::numeric_limits<float>::infinity();
    for (size_t q = 0; q < n; q += kPresortedRun) {
      V r[kPresortedRun];
      for (size_t m = 0; m < kPresortedRun; ++m) {
        r[m] = q + m < n ? load(a.rows + (q + m) * a.stride + off) : inf;
      }
      Sort16(r);
      for (size_t m = 0; m < kPresortedRun; ++m) t[q + m] = r[m];
    }
    Network<W>(a.sort_tmp, a.pairs, a.num_pairs);
    const V lo = t[lo_i], hi = t[hi_i];
    V result;
    if (a.median) {
      result = (n % 2 == 1) ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) * 0.5f;
    } else {
      double s[W] = {};
      for (size_t i = lo_i; i <= hi_i; ++i) {
        for (int l = 0; l < W; ++l) s[l] += static_cast<double>(t[i][l]);
      }
      const double inv = 1.0 / static_cast<double>(hi_i - lo_i + 1);
      for (int l = 0; l < W; ++l) result[l] = static_cast<float>(s[l] * inv);
    }
    const size_t valid = a.len - off < W ? a.len - off : W;
    if (valid == W) {
      std::memcpy(a.out + off, &result, sizeof result);
    } else {
      for (size_t l = 0; l < valid; ++l) a.out[off + l] = result[l];
    }
    // Counted in float lanes (exact: at most kBlock / W per block): a float select is one
    // masked blend on every SIMD build, where an int mask vector is not with AVX-512F alone.
    if (valid == W) {
      const V one = V{} + 1.0f, zero = V{};
      for (size_t i = 0; i < n; ++i) {
        const V x = load(a.rows + i * a.stride + off);
        cnt[i] += x >= lo ? (x <= hi ? one : zero) : zero;
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        for (size_t l = 0; l < valid; ++l) {
          const float x = a.rows[i * a.stride + off + l];
          cnt[i][l] += (x >= lo[l] && x <= hi[l]) ? 1.0f : 0.0f;
        }
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t s = 0;
    for (int l = 0; l < W; ++l) s += static_cast<int64_t>(cnt[i][l]);
    a.kept[i] += static_cast<uint64_t>(s);
  }
}

[[gnu::always_inline]] inline float HSum(V8 v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

[[gnu::always_inline]] inline void PairBody(const float* rows, size_t stride, size_t len, size_t n,
                                            PairMode mode, double* partial) {
  const size_t groups = len / 8;
  const bool gram = mode != PairMode::kDistances;
  for (size_t i = 0; i < n; ++i) {
    const float* ri = rows + i * stride;
    size_t j = gram ? i : i + 1;
    const size_t j_end = mode == PairMode::kNorms ? i + 1 : n;
    for (; j + 4 <= j_end; j += 4) {
      const float* r0 = rows + j * stride;
      V8 s0{}, s1{}, s2{}, s3{};
      for (size_t g = 0; g < groups; ++g) {
        const V8 x = Load(ri + 8 * g);
        const V8 y0 = Load(r0 + 8 * g), y1 = Load(r0 + stride + 8 * g);
        const V8 y2 = Load(r0 + 2 * stride + 8 * g), y3 = Load(r0 + 3 * stride + 8 * g);
        if (gram) {
          s0 += x * y0;
          s1 += x * y1;
          s2 += x * y2;
          s3 += x * y3;
        } else {
          const V8 d0 = x - y0, d1 = x - y1, d2 = x - y2, d3 = x - y3;
          s0 += d0 * d0;
          s1 += d1 * d1;
          s2 += d2 * d2;
          s3 += d3 * d3;
        }
      }
      partial[i * n + j] += HSum(s0);
      partial[i * n + j + 1] += HSum(s1);
      partial[i * n + j + 2] += HSum(s2);
      partial[i * n + j + 3] += HSum(s3);
    }
    for (; j < j_end; ++j) {
      const float* rj = rows + j * stride;
      V8 s{};
      for (size_t g = 0; g < groups; ++g) {
        const V8 x = Load(ri + 8 * g), y = Load(rj + 8 * g);
        if (gram) {
          s += x * y;
        } else {
          const V8 d = x - y;
          s += d * d;
        }
      }
      partial[i * n + j] += HSum(s);
    }
  }
}

// Sorts the n rows of W floats at f in place. Written as (x < y ? x : y) and (x > y ? x : y),
// which are exactly vminps and vmaxps, so the SIMD builds compile each comparator to a min and a
// max.
template <int W>
[[gnu::always_inline]] inline void Network(float* f, const uint16_t* pairs, size_t count) {
  using V = typename Lanes<W>::F;
  V* t = reinterpret_cast<V*>(f);
  for (size_t c = 0; c < count; ++c) {
    const V x = t[pairs[2 * c]], y = t[pairs[2 * c + 1]];
    t[pairs[2 * c]] = x < y ? x : y;
    t[pairs[2 * c + 1]] = x > y ? x : y;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void OrderStatsAvx2(const OrderStatsArgs& a) {
  OrderStatsBody<8>(a);
}
#endif

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void PairAvx2(const float* rows, size_t stride, size_t len,
                                                  size_t n, PairMode mode, double* partial) {
  PairBody(rows, stride, len, n, mode, partial);
}
#endif
void OrderStatsPortable(const OrderStatsArgs& a) { OrderStatsBody<8>(a); }
void PairPortable(const float* rows, size_t stride, size_t len, size_t n, PairMode mode,
                  double* partial) {
  PairBody(rows, stride, len, n, mode, partial);
}

bool UseAvx2() {
  static const bool use = ActiveIsa() != Isa::kScalar;
  return use;
}

}  // namespace

std::vector<uint16_t> SortingNetwork(size_t n, size_t first_run) {
  std::vector<uint16_t> pairs;
  size_t p2 = 1;
  while (p2 < n) p2 <<= 1;
  for (size_t p = first_run; p < p2; p <<= 1) {
    for (size_t k = p; k >= 1; k >>= 1) {
      for (size_t j = k % p; j + k < p2; j += 2 * k) {
        for (size_t i = 0; i < k && i + j + k < p2; ++i) {
          const size_t lo = i + j, hi = i + j + k;
          if (lo / (2 * p) != hi / (2 * p)) continue;
          if (hi >= n) continue;  // padding (+inf) stays where it is
          pairs.push_back(static_cast<uint16_t>(lo));
          pairs.push_back(static_cast<uint16_t>(hi));
        }
      }
    }
  }
  return pairs;
}

void OrderStatsBlock(const OrderStatsArgs& a) {
#if defined(__x86_64__)
  if (UseAvx2()) return OrderStatsAvx2(a);
#endif
  OrderStatsPortable(a);
}

void PairBlock(const float* rows, size_t stride, size_t len, size_t n, PairMode mode,
               double* partial) {
#if defined(__x86_64__)
  if (UseAvx2()) return PairAvx2(rows, stride, len, n, mode, partial);
#endif
  PairPortable(rows, stride, len, n, mode, partial);
}

}  // namespace shoal::aggregator::internal
