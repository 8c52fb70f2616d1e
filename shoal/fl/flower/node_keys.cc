#include "shoal/fl/flower/node_keys.h"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <cctype>
#include <memory>
#include <vector>

namespace shoal::flower {
namespace {

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

Result<std::string> Pem(EVP_PKEY* key) {
  if (EVP_PKEY_get_base_id(key) != EVP_PKEY_EC) return InvalidArgument("not an EC public key");
  char group[64] = {};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &len) !=
      1) {
    return InvalidArgument("an EC key without a named curve");
  }
  const std::string_view g(group, len);
  if (g != "prime256v1" && g != "secp384r1" && g != "secp521r1" && g != "P-256" && g != "P-384" &&
      g != "P-521") {
    return InvalidArgument("EC curve " + std::string(g) + " is not an approved NIST curve");
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (PEM_write_bio_PUBKEY(bio.get(), key) != 1) return InvalidArgument("cannot write the key");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// One SSH wire string (uint32 big-endian length, then the bytes) off the front of `in`.
bool SshString(std::string_view& in, std::string_view* out) {
  if (in.size() < 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const size_t n = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  if (in.size() - 4 < n) return false;
  *out = in.substr(4, n);
  in.remove_prefix(4 + n);
  return true;
}

Result<std::string> FromOpenSsh(std::string_view line) {
  const size_t sp = line.find(' ');
  const std::string_view type = line.substr(0, sp);
  std::string_view rest = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
  const std::string_view b64 = rest.substr(0, rest.find_first_of(" \r\n"));
  std::vector<unsigned char> buf(b64.size() / 4 * 3 + 3);
  if (b64.empty() || b64.size() % 4 != 0) return InvalidArgument("the key's base64 is cut");
  const int n = EVP_DecodeBlock(buf.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  if (n < 0) return InvalidArgument("the key is not base64");
  size_t len = static_cast<size_t>(n);
  if (b64.ends_with("==")) {
    len -= 2;
  } else if (b64.ends_with("=")) {
    len -= 1;
  }
  std::string_view blob(reinterpret_cast<const char*>(buf.data()), len);
  std::string_view name, curve, point;
  if (!SshString(blob, &name) || !SshString(blob, &curve) || !SshString(blob, &point) ||
      !blob.empty() || name != type) {
    return InvalidArgument("not an OpenSSH " + std::string(type) + " key");
  }
  const char* group = curve == "nistp256"   ? "P-256"
                      : curve == "nistp384" ? "P-384"
                      : curve == "nistp521" ? "P-521"
                                            : nullptr;
  if (group == nullptr) {
    return InvalidArgument("EC curve " + std::string(curve) + " is not an approved NIST curve");
  }
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(),
                                                                      OSSL_PARAM_BLD_free);
  OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0);
  OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size());
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()),
                                                                 OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* raw = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return InvalidArgument("the key's point is not on " + std::string(group));
  }
  Pkey key(raw, EVP_PKEY_free);
  // fromdata takes any octets: check the point is on the curve.
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> check(
      EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr), EVP_PKEY_CTX_free);
  if (!check || EVP_PKEY_public_check(check.get()) != 1) {
    return InvalidArgument("the key's point is not on " + std::string(group));
  }
  return Pem(key.get());
}

}  // namespace

Result<std::string> NodePublicKeyPem(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  if (text.starts_with("ecdsa-sha2-")) return FromOpenSsh(text);
  if (text.starts_with("-----BEGIN PUBLIC KEY-----")) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), BIO_free);
    Pkey key(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
    if (!key) return InvalidArgument("the PEM public key does not parse");
    return Pem(key.get());
  }
  return InvalidArgument(
      "not a SuperNode public key: expected an OpenSSH 'ecdsa-sha2-nistp...' line (ssh-keygen -t "
      "ecdsa) or a PEM '-----BEGIN PUBLIC KEY-----'");
}

}  // namespace shoal::flower
