// Secure aggregation's cryptographic primitives, all from OpenSSL 3 (libcrypto): X25519 key
// agreement, HKDF-SHA256, AES-128-CTR as the PRG that expands a 16-byte seed into a mask vector
// in Z_{2^32}, AES-128-GCM for the key shares the server routes between clients, SHA-256. The
// Python SDK (shoal_fl/secagg.py) does the same with `cryptography`: the masks are bit-identical.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::secagg {

using Key32 = std::array<uint8_t, 32>;  // an X25519 private or public key, a shared secret
using Seed = std::array<uint8_t, 16>;   // a PRG seed (an AES-128 key)

// HKDF info strings: one per use of a pairwise secret, so a mask seed is never a share key.
inline constexpr std::string_view kMaskInfo = "shoal-secagg v1 pairwise mask";
inline constexpr std::string_view kShareInfo = "shoal-secagg v1 share encryption";

struct KeyPair {
  Key32 secret{};
  Key32 public_key{};
};

// A fresh key pair from the OS's random source.
Result<KeyPair> GenerateKeyPair();
// The public key of an X25519 private key (the server checks a reconstructed key with it).
Result<Key32> PublicKeyOf(const Key32& secret);
// X25519(secret, peer): the raw shared secret. Refuses an all-zero result (a low-order peer key).
Result<Key32> Agree(const Key32& secret, const Key32& peer);
// HKDF-SHA256 with a zero salt, `info`, `out.size()` bytes.
Status Hkdf(std::span<const uint8_t> ikm, std::string_view info, std::span<uint8_t> out);
// The pairwise mask seed of two parties: HKDF(X25519(secret, peer), kMaskInfo), 16 bytes.
Result<Seed> PairwiseSeed(const Key32& secret, const Key32& peer);

// The PRG: AES-128-CTR keyed by `seed`, IV zero, over zero bytes; element i of the mask is the
// keystream's bytes [4i, 4i+4) read little-endian. MaskAdd adds (sign +1) or subtracts (-1) the
// mask's elements [begin, begin + acc.size()) to acc, modulo 2^32: a range starts at any element,
// so threads can expand one seed in pieces.
Status MaskAdd(const Seed& seed, int sign, uint64_t begin, std::span<uint32_t> acc);
// The mask's first n elements.
Result<std::vector<uint32_t>> Mask(const Seed& seed, size_t n);

// AES-128-GCM with a random 12-byte nonce: nonce || ciphertext || tag (16).
Result<std::vector<uint8_t>> Seal(const Seed& key, std::span<const uint8_t> plaintext,
                                  std::span<const uint8_t> aad);
Result<std::vector<uint8_t>> Open(const Seed& key, std::span<const uint8_t> sealed,
                                  std::span<const uint8_t> aad);

std::array<uint8_t, 32> Sha256(std::span<const uint8_t> data);
Status RandomBytes(std::span<uint8_t> out);

// Lower-case hex and base64 (the JSON protocol's encodings).
std::string Hex(std::span<const uint8_t> bytes);
std::string Base64(std::span<const uint8_t> bytes);
// Exactly `want` bytes (0: any length) or kInvalidArgument naming `field`.
Result<std::vector<uint8_t>> FromBase64(std::string_view text, size_t want, std::string_view field);

}  // namespace shoal::secagg
