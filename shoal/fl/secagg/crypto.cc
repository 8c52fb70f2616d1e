// OpenSSL 3 behind secure aggregation's primitives (crypto.h). Every EVP object is held by a
// unique_ptr with its free function; every failure is a Status naming the step.
#include "shoal/fl/secagg/crypto.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace shoal::secagg {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

Status Failed(std::string_view what) { return Internal("secagg: OpenSSL " + std::string(what)); }

Pkey PrivateKey(const Key32& secret) {
  return Pkey(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, secret.data(), 32));
}

// Keystream elements per chunk: 16 KiB, stays in L1 while it is added.
constexpr size_t kChunk = 4096;

}  // namespace

Result<KeyPair> GenerateKeyPair() {
  KeyPair kp;
  SHOAL_RETURN_IF_ERROR(RandomBytes(kp.secret));
  auto pub = PublicKeyOf(kp.secret);
  if (!pub.ok()) return pub.status();
  kp.public_key = *pub;
  return kp;
}

Result<Key32> PublicKeyOf(const Key32& secret) {
  Pkey key = PrivateKey(secret);
  if (!key) return Failed("X25519 private key");
  Key32 pub{};
  size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &len) != 1 || len != 32) {
    return Failed("X25519 public key");
  }
  return pub;
}

Result<Key32> Agree(const Key32& secret, const Key32& peer) {
  Pkey mine = PrivateKey(secret);
  Pkey theirs(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer.data(), 32));
  if (!mine || !theirs) return Failed("X25519 key");
  PkeyCtx ctx(EVP_PKEY_CTX_new(mine.get(), nullptr));
  Key32 out{};
  size_t len = out.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_derive_set_peer(ctx.get(), theirs.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1 || len != 32) {
    return InvalidArgument("secagg: X25519 agreement failed (a low-order or invalid public key)");
  }
  return out;
}

Status Hkdf(std::span<const uint8_t> ikm, std::string_view info, std::span<uint8_t> out) {
  static constexpr uint8_t kZeroSalt[32] = {};
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), kZeroSalt, sizeof kZeroSalt) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), ikm.data(), static_cast<int>(ikm.size())) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), reinterpret_cast<const unsigned char*>(info.data()),
                                  static_cast<int>(info.size())) != 1) {
    return Failed("HKDF set-up");
  }
  size_t len = out.size();
  if (EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1 || len != out.size()) {
    return Failed("HKDF");
  }
  return Status::Ok();
}

Result<Seed> PairwiseSeed(const Key32& secret, const Key32& peer) {
  auto shared = Agree(secret, peer);
  if (!shared.ok()) return shared.status();
  Seed seed{};
  SHOAL_RETURN_IF_ERROR(Hkdf(*shared, kMaskInfo, seed));
  return seed;
}

Status MaskAdd(const Seed& seed, int sign, uint64_t begin, std::span<uint32_t> acc) {
  if (acc.empty()) return Status::Ok();
  // The counter block of element `begin`: AES-CTR's IV is a 128-bit big-endian counter.
  const uint64_t block = begin / 4;
  uint8_t iv[16] = {};
  for (int i = 0; i < 8; ++i) iv[15 - i] = static_cast<uint8_t>(block >> (8 * i));
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_128_ctr(), nullptr, seed.data(), iv) != 1) {
    return Failed("AES-128-CTR set-up");
  }
  alignas(64) static thread_local uint32_t zeros[kChunk] = {};
  alignas(64) uint32_t stream[kChunk];
  int out_len = 0;
  // Skip to `begin` within its block.
  if (const size_t skip = begin % 4; skip != 0) {
    if (EVP_EncryptUpdate(ctx.get(), reinterpret_cast<uint8_t*>(stream), &out_len,
                          reinterpret_cast<const uint8_t*>(zeros),
                          static_cast<int>(4 * skip)) != 1) {
      return Failed("AES-128-CTR");
    }
  }
  const uint32_t neg = sign < 0 ? ~uint32_t{0} : 0;  // x ^ neg - neg: x or -x
  for (size_t done = 0; done < acc.size();) {
    const size_t m = std::min(kChunk, acc.size() - done);
    if (EVP_EncryptUpdate(ctx.get(), reinterpret_cast<uint8_t*>(stream), &out_len,
                          reinterpret_cast<const uint8_t*>(zeros), static_cast<int>(4 * m)) != 1) {
      return Failed("AES-128-CTR");
    }
    uint32_t* a = acc.data() + done;
    // Little-endian hosts only (x86-64, aarch64): the keystream's bytes are the u32s.
    for (size_t i = 0; i < m; ++i) a[i] += (stream[i] ^ neg) - neg;
    done += m;
  }
  return Status::Ok();
}

Result<std::vector<uint32_t>> Mask(const Seed& seed, size_t n) {
  std::vector<uint32_t> out(n, 0);
  SHOAL_RETURN_IF_ERROR(MaskAdd(seed, +1, 0, out));
  return out;
}

Result<std::vector<uint8_t>> Seal(const Seed& key, std::span<const uint8_t> plaintext,
                                  std::span<const uint8_t> aad) {
  std::vector<uint8_t> out(12 + plaintext.size() + 16);
  SHOAL_RETURN_IF_ERROR(RandomBytes(std::span(out.data(), 12)));
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_128_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, key.data(), out.data()) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), out.data() + 12, &len, plaintext.data(),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out.data() + 12 + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, 16,
                          out.data() + 12 + plaintext.size()) != 1) {
    return Failed("AES-128-GCM seal");
  }
  return out;
}

Result<std::vector<uint8_t>> Open(const Seed& key, std::span<const uint8_t> sealed,
                                  std::span<const uint8_t> aad) {
  if (sealed.size() < 28) return InvalidArgument("secagg: sealed share shorter than 28 bytes");
  const size_t n = sealed.size() - 28;
  std::vector<uint8_t> out(n);
  std::array<uint8_t, 16> tag;
  std::memcpy(tag.data(), sealed.data() + 12 + n, 16);
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_128_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, key.data(), sealed.data()) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), out.data(), &len, sealed.data() + 12, static_cast<int>(n)) !=
          1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, 16, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), out.data() + len, &len) != 1) {
    return InvalidArgument("secagg: sealed share does not authenticate (wrong key or altered)");
  }
  return out;
}

std::array<uint8_t, 32> Sha256(std::span<const uint8_t> data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

Status RandomBytes(std::span<uint8_t> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) return Failed("RAND_bytes");
  return Status::Ok();
}

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * bytes.size());
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

std::string Base64(std::span<const uint8_t> bytes) {
  std::string s(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(s.data()), bytes.data(),
                                static_cast<int>(bytes.size()));
  s.resize(static_cast<size_t>(n));
  return s;
}

Result<std::vector<uint8_t>> FromBase64(std::string_view text, size_t want,
                                        std::string_view field) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(field) + ": " + why);
  };
  if (text.size() % 4 != 0 || text.size() > (size_t{1} << 20)) {
    return bad("must be standard base64 (a multiple of 4 characters)");
  }
  std::vector<uint8_t> out(3 * text.size() / 4);
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return bad("must be standard base64");
  size_t len = static_cast<size_t>(n);
  if (!text.empty() && text.back() == '=') --len;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --len;
  out.resize(len);
  if (want != 0 && len != want) {
    return bad("must be " + std::to_string(want) + " bytes in base64, not " + std::to_string(len));
  }
  return out;
}

}  // namespace shoal::secagg
