// SecAgg+'s arithmetic around the masks: fixed-point quantization into Z_{2^32}, the k-regular
// neighbour graph of a round, a client's masked input, and the server's unmasking of the sum.
// The Python SDK (shoal_fl/secagg.py) quantizes and masks the same way; tests compare the bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/secagg/crypto.h"

namespace shoal::aggregator {
class WorkerTeam;
}

namespace shoal::secagg {

// spec.privacy.secureAggregation's fixed point: x clipped to [-clip, clip], mapped to
// [0, 2^bits - 1] by q = floor((x + clip) * scale + 0.5), scale = (2^bits - 1) / (2 clip),
// computed in double. The sum of K inputs is decoded as S / scale - K * clip.
struct Quantizer {
  double clip = 1.0;
  uint32_t bits = 16;
  double Scale() const { return static_cast<double>((uint64_t{1} << bits) - 1) / (2.0 * clip); }
  void Quantize(std::span<const float> x, std::span<uint32_t> q) const;
  // out[i] = S[i] / scale - count * clip: the sum of `count` inputs' values.
  void DecodeSum(std::span<const uint32_t> sum, uint64_t count, std::span<float> out) const;
};

// The neighbours of each of n participants (indices 0..n-1) in a k-regular graph: participants
// are placed on a ring in an order drawn from `seed` (a splitmix64 stream, Fisher-Yates) and
// each is joined to the k/2 nearest on each side (k even); everyone else's when k >= n - 1.
// Each list is sorted.
std::vector<std::vector<uint32_t>> NeighbourGraph(uint32_t n, uint32_t k, uint64_t seed);

// One pairwise mask the input of participant `self` carries: +PRG(seed) toward a neighbour with
// a larger index, -PRG(seed) toward a smaller one, so each pair's masks cancel in the sum.
inline int PairSign(uint32_t self, uint32_t neighbour) { return self < neighbour ? +1 : -1; }

// A client's masked input: y = q + PRG(self_seed) + sum over `pair_seeds` of sign * PRG(seed).
struct SignedSeed {
  Seed seed{};
  int sign = +1;
};
Result<std::vector<uint32_t>> MaskInput(std::span<const uint32_t> q, const Seed& self_seed,
                                        std::span<const SignedSeed> pair_seeds);

// acc += sum over `seeds` of sign * PRG(seed) (mod 2^32), split across `team`'s threads by
// element range (each thread expands every seed over its own range), or on the caller's alone.
Status ApplyMasks(std::span<uint32_t> acc, std::span<const SignedSeed> seeds,
                  aggregator::WorkerTeam* team = nullptr);

}  // namespace shoal::secagg
