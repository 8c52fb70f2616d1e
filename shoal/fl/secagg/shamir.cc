#include "shoal/fl/secagg/shamir.h"

#include <set>
#include <string>

#include "shoal/fl/secagg/crypto.h"

namespace shoal::secagg {
namespace {

constexpr uint64_t P = kShamirPrime;

uint64_t Add(uint64_t a, uint64_t b) {
  const uint64_t s = a + b;  // < 2^62: no overflow
  return s >= P ? s - P : s;
}
uint64_t Sub(uint64_t a, uint64_t b) { return a >= b ? a - b : a + P - b; }

// Element `c` of the secret: bytes [7c, 7c + 7), little-endian, missing bytes zero.
uint64_t Chunk(std::span<const uint8_t> secret, size_t c) {
  uint64_t v = 0;
  for (size_t i = 0; i < kChunkBytes && c * kChunkBytes + i < secret.size(); ++i) {
    v |= uint64_t{secret[c * kChunkBytes + i]} << (8 * i);
  }
  return v;
}

// Uniform in [0, p) by rejection from 61 random bits.
Result<uint64_t> RandomElement() {
  for (;;) {
    uint64_t v = 0;
    SHOAL_RETURN_IF_ERROR(RandomBytes(std::span(reinterpret_cast<uint8_t*>(&v), sizeof v)));
    v &= P;  // 61 bits
    if (v < P) return v;
  }
}

// Lagrange basis at `at` for the points xs: l_i(at) = prod_{j != i} (at - x_j) / (x_i - x_j).
std::vector<uint64_t> Basis(std::span<const uint64_t> xs, uint64_t at) {
  std::vector<uint64_t> l(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    uint64_t num = 1, den = 1;
    for (size_t j = 0; j < xs.size(); ++j) {
      if (j == i) continue;
      num = FieldMul(num, Sub(at, xs[j]));
      den = FieldMul(den, Sub(xs[i], xs[j]));
    }
    l[i] = FieldMul(num, FieldInv(den));
  }
  return l;
}

}  // namespace

uint64_t FieldMul(uint64_t a, uint64_t b) {
  const unsigned __int128 m = static_cast<unsigned __int128>(a) * b;
  // 2^61 = 1 (mod p): fold the high bits onto the low ones.
  const uint64_t lo = static_cast<uint64_t>(m) & P;
  const uint64_t hi = static_cast<uint64_t>(m >> 61);
  return Add(lo, hi % P);
}

uint64_t FieldInv(uint64_t a) {
  // Fermat: a^(p-2).
  uint64_t result = 1, base = a % P, e = P - 2;
  while (e) {
    if (e & 1) result = FieldMul(result, base);
    base = FieldMul(base, base);
    e >>= 1;
  }
  return result;
}

Result<std::vector<Share>> Split(std::span<const uint8_t> secret, std::span<const uint64_t> xs,
                                 size_t threshold) {
  if (threshold == 0 || threshold > xs.size()) {
    return InvalidArgument("shamir: threshold " + std::to_string(threshold) + " with " +
                           std::to_string(xs.size()) + " shares");
  }
  const size_t chunks = ShareElements(secret.size());
  std::vector<Share> shares(xs.size());
  for (size_t s = 0; s < xs.size(); ++s) {
    if (xs[s] == 0 || xs[s] >= P) return InvalidArgument("shamir: a share point is 0 or >= p");
    shares[s].x = xs[s];
    shares[s].ys.resize(chunks);
  }
  std::vector<uint64_t> coeff(threshold);
  for (size_t c = 0; c < chunks; ++c) {
    coeff[0] = Chunk(secret, c);
    for (size_t k = 1; k < threshold; ++k) {
      auto r = RandomElement();
      if (!r.ok()) return r.status();
      coeff[k] = *r;
    }
    for (Share& sh : shares) {
      uint64_t y = 0;  // Horner
      for (size_t k = threshold; k-- > 0;) y = Add(FieldMul(y, sh.x), coeff[k]);
      sh.ys[c] = y;
    }
  }
  return shares;
}

Result<std::vector<uint8_t>> Combine(std::span<const Share> shares, size_t threshold,
                                     size_t secret_bytes, uint64_t* bad_x) {
  const size_t chunks = ShareElements(secret_bytes);
  if (threshold == 0) return InvalidArgument("shamir: threshold 0");
  if (shares.size() < threshold) {
    return InvalidArgument("shamir: " + std::to_string(shares.size()) + " share(s), " +
                           std::to_string(threshold) + " needed");
  }
  std::set<uint64_t> seen;
  for (const Share& s : shares) {
    if (s.x == 0 || s.x >= P || !seen.insert(s.x).second) {
      return InvalidArgument("shamir: share point " + std::to_string(s.x) +
                             " is 0, outside the field or given twice");
    }
    if (s.ys.size() != chunks) {
      return InvalidArgument("shamir: the share at point " + std::to_string(s.x) + " has " +
                             std::to_string(s.ys.size()) + " elements, not " +
                             std::to_string(chunks));
    }
    for (uint64_t y : s.ys) {
      if (y >= P) {
        return InvalidArgument("shamir: the share at point " + std::to_string(s.x) +
                               " holds an element outside the field");
      }
    }
  }
  std::vector<uint64_t> xs(threshold);
  for (size_t i = 0; i < threshold; ++i) xs[i] = shares[i].x;
  const std::vector<uint64_t> at0 = Basis(xs, 0);
  std::vector<uint8_t> secret(secret_bytes, 0);
  for (size_t c = 0; c < chunks; ++c) {
    uint64_t v = 0;
    for (size_t i = 0; i < threshold; ++i) v = Add(v, FieldMul(at0[i], shares[i].ys[c]));
    if (v >> (8 * kChunkBytes)) return InvalidArgument("shamir: the shares do not agree");
    for (size_t i = 0; i < kChunkBytes && c * kChunkBytes + i < secret_bytes; ++i) {
      secret[c * kChunkBytes + i] = static_cast<uint8_t>(v >> (8 * i));
    }
  }
  // Further shares: each must lie on the polynomials the first `threshold` define.
  for (size_t s = threshold; s < shares.size(); ++s) {
    const std::vector<uint64_t> l = Basis(xs, shares[s].x);
    for (size_t c = 0; c < chunks; ++c) {
      uint64_t v = 0;
      for (size_t i = 0; i < threshold; ++i) v = Add(v, FieldMul(l[i], shares[i].ys[c]));
      if (v != shares[s].ys[c]) {
        if (bad_x != nullptr) *bad_x = shares[s].x;
        return InvalidArgument("shamir: the share at point " + std::to_string(shares[s].x) +
                               " does not lie on the polynomial of the others");
      }
    }
  }
  return secret;
}

}  // namespace shoal::secagg
