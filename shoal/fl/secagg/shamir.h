// Shamir secret sharing over the prime field GF(2^61 - 1), for SecAgg+'s secret keys and
// self-mask seeds. Written here rather than taken from a library: it is ~100 lines, OpenSSL has
// none, and the Python SDK must produce shares this code reconstructs bit for bit (same field,
// same chunking), which a hand-written pair states exactly. A secret of any length is cut into
// 7-byte chunks (little-endian, < 2^56 < p), each shared with its own random polynomial of
// degree t - 1 at the same points; a share is the point x (the holder's index in the round + 1)
// and one field element per chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::secagg {

inline constexpr uint64_t kShamirPrime = (uint64_t{1} << 61) - 1;
inline constexpr size_t kChunkBytes = 7;

inline constexpr size_t ShareElements(size_t secret_bytes) {
  return (secret_bytes + kChunkBytes - 1) / kChunkBytes;
}

struct Share {
  uint64_t x = 0;            // 1 .. p-1
  std::vector<uint64_t> ys;  // ShareElements(secret bytes), each < p
};

// Shares of `secret` at the points `xs` (distinct, nonzero), any `threshold` of which
// reconstruct it; coefficients from the OS's random source.
Result<std::vector<Share>> Split(std::span<const uint8_t> secret, std::span<const uint64_t> xs,
                                 size_t threshold);

// The secret of `secret_bytes` bytes from `shares`: kInvalidArgument with fewer than
// `threshold`, with duplicate or zero points, or with elements outside the field. Uses the first
// `threshold` shares; when there are more, each further one must lie on the same polynomials
// (else kInvalidArgument naming its point, in *bad_x when given).
Result<std::vector<uint8_t>> Combine(std::span<const Share> shares, size_t threshold,
                                     size_t secret_bytes, uint64_t* bad_x = nullptr);

// Field arithmetic (exposed for the tests).
uint64_t FieldMul(uint64_t a, uint64_t b);
uint64_t FieldInv(uint64_t a);

}  // namespace shoal::secagg
