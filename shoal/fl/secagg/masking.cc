#include "shoal/fl/secagg/masking.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "shoal/fl/kernels/worker_team.h"

namespace shoal::secagg {

void Quantizer::Quantize(std::span<const float> x, std::span<uint32_t> q) const {
  const double scale = Scale();
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = std::clamp(static_cast<double>(x[i]), -clip, clip);
    q[i] = static_cast<uint32_t>(std::floor((v + clip) * scale + 0.5));
  }
}

void Quantizer::DecodeSum(std::span<const uint32_t> sum, uint64_t count,
                          std::span<float> out) const {
  const double inv = 1.0 / Scale();
  const double offset = static_cast<double>(count) * clip;
  for (size_t i = 0; i < sum.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(sum[i]) * inv - offset);
  }
}

std::vector<std::vector<uint32_t>> NeighbourGraph(uint32_t n, uint32_t k, uint64_t seed) {
  std::vector<std::vector<uint32_t>> adj(n);
  if (n == 0) return adj;
  if (k + 1 >= n) {
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        if (j != i) adj[i].push_back(j);
      }
    }
    return adj;
  }
  uint64_t state = seed;
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> ring(n);
  std::iota(ring.begin(), ring.end(), 0u);
  for (uint32_t i = n - 1; i > 0; --i) std::swap(ring[i], ring[next() % (i + 1)]);
  const uint32_t half = k / 2;
  for (uint32_t p = 0; p < n; ++p) {
    for (uint32_t d = 1; d <= half; ++d) {
      adj[ring[p]].push_back(ring[(p + d) % n]);
      adj[ring[p]].push_back(ring[(p + n - d) % n]);
    }
  }
  for (auto& a : adj) std::sort(a.begin(), a.end());
  return adj;
}

Result<std::vector<uint32_t>> MaskInput(std::span<const uint32_t> q, const Seed& self_seed,
                                        std::span<const SignedSeed> pair_seeds) {
  std::vector<uint32_t> y(q.begin(), q.end());
  SHOAL_RETURN_IF_ERROR(MaskAdd(self_seed, +1, 0, y));
  for (const SignedSeed& s : pair_seeds) SHOAL_RETURN_IF_ERROR(MaskAdd(s.seed, s.sign, 0, y));
  return y;
}

Status ApplyMasks(std::span<uint32_t> acc, std::span<const SignedSeed> seeds,
                  aggregator::WorkerTeam* team) {
  if (team == nullptr || team->threads() == 1 || acc.size() < (size_t{1} << 16)) {
    for (const SignedSeed& s : seeds) SHOAL_RETURN_IF_ERROR(MaskAdd(s.seed, s.sign, 0, acc));
    return Status::Ok();
  }
  // Ranges of 64 Ki elements (256 KiB: stays in L2 while every seed is expanded over it),
  // taken in order from a shared counter.
  constexpr size_t kRange = size_t{1} << 16;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&](unsigned) {
    for (;;) {
      const size_t begin = next.fetch_add(1, std::memory_order_relaxed) * kRange;
      if (begin >= acc.size() || failed.load(std::memory_order_relaxed)) return;
      const std::span<uint32_t> part = acc.subspan(begin, std::min(kRange, acc.size() - begin));
      for (const SignedSeed& s : seeds) {
        if (!MaskAdd(s.seed, s.sign, begin, part).ok()) failed.store(true);
      }
    }
  };
  team->Run(work);
  return failed.load() ? Internal("secagg: expanding a mask failed (OpenSSL)") : Status::Ok();
}

}  // namespace shoal::secagg
