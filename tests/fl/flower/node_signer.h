// Real SuperNode identities for FleetService's tests: an EC P-384 key per name (as
// flower-supernode makes one), its PEM the node's public key, each call signed as Flower 1.42
// signs it (flwr-public-key, flwr-timestamp, flwr-signature: node_auth.h).
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shoal/fl/flower/node_auth.h"

namespace shoal::flower {

class NodeSigner {
 public:
  // The PEM of `name`'s public key (the key made on first use).
  std::string Pem(const std::string& name) {
    EVP_PKEY* k = Key(name);
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
    PEM_write_bio_PUBKEY(bio.get(), k);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<size_t>(n));
  }
  // `name`'s headers for a call signed at `at` (Python's isoformat of an aware UTC time).
  NodeAuthHeaders Sign(const std::string& name, std::chrono::system_clock::time_point at) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(at.time_since_epoch());
    const time_t secs = static_cast<time_t>(us.count() / 1000000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[64];
    std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%06lld+00:00", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long long>(us.count() % 1000000));
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, Key(name));
    size_t len = 0;
    const std::string msg = ts;
    EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(msg.data()),
                   msg.size());
    std::vector<unsigned char> sig(len);
    EVP_DigestSign(ctx.get(), sig.data(), &len, reinterpret_cast<const unsigned char*>(msg.data()),
                   msg.size());
    sig.resize(len);
    return {B64(Pem(name)), B64(std::string(sig.begin(), sig.end())), msg};
  }

 private:
  static std::string B64(const std::string& in) {
    std::vector<unsigned char> out(4 * ((in.size() + 2) / 3) + 1);
    const int n = EVP_EncodeBlock(out.data(), reinterpret_cast<const unsigned char*>(in.data()),
                                  static_cast<int>(in.size()));
    return std::string(reinterpret_cast<const char*>(out.data()), static_cast<size_t>(n));
  }
  EVP_PKEY* Key(const std::string& name) {
    auto& k = keys_[name];
    if (!k) k.reset(EVP_EC_gen("P-384"), EVP_PKEY_free);
    return k.get();
  }
  std::map<std::string, std::shared_ptr<EVP_PKEY>> keys_;
};

}  // namespace shoal::flower
