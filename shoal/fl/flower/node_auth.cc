#include "shoal/fl/flower/node_auth.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cctype>
#include <cmath>
#include <ctime>
#include <memory>
#include <vector>

namespace shoal::flower {
namespace {

// Strict base64 (padding required, nothing else), as Python's b64decode(validate=True).
bool Base64Decode(const std::string& in, std::string* out) {
  if (in.empty() || in.size() % 4 != 0) return false;
  for (char c : in) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') {
      return false;
    }
  }
  std::vector<unsigned char> buf(in.size() / 4 * 3);
  const int n = EVP_DecodeBlock(buf.data(), reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return false;
  size_t len = static_cast<size_t>(n);
  if (in.ends_with("==")) {
    len -= 2;
  } else if (in.ends_with("=")) {
    len -= 1;
  }
  out->assign(reinterpret_cast<const char*>(buf.data()), len);
  return true;
}

bool Digits(const std::string& s, size_t at, size_t n, int* v) {
  if (at + n > s.size()) return false;
  *v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    *v = *v * 10 + (s[i] - '0');
  }
  return true;
}

}  // namespace

Result<double> ParseIsoTimestamp(const std::string& t) {
  const auto bad = [&] {
    return InvalidArgument("flwr-timestamp: '" + t.substr(0, 64) +
                           "' is not an ISO 8601 date-time with a UTC offset");
  };
  int year, mon, day, hour, min, sec;
  if (!Digits(t, 0, 4, &year) || t.size() < 19 || t[4] != '-' || !Digits(t, 5, 2, &mon) ||
      t[7] != '-' || !Digits(t, 8, 2, &day) || (t[10] != 'T' && t[10] != ' ') ||
      !Digits(t, 11, 2, &hour) || t[13] != ':' || !Digits(t, 14, 2, &min) || t[16] != ':' ||
      !Digits(t, 17, 2, &sec)) {
    return bad();
  }
  size_t at = 19;
  double frac = 0;
  if (at < t.size() && t[at] == '.') {
    double scale = 0.1;
    size_t digits = 0;
    for (++at; at < t.size() && std::isdigit(static_cast<unsigned char>(t[at])); ++at, ++digits) {
      frac += (t[at] - '0') * scale;
      scale /= 10;
    }
    if (digits == 0) return bad();
  }
  int offset_s = 0;
  if (at < t.size() && t[at] == 'Z' && at + 1 == t.size()) {
    offset_s = 0;
  } else if (at + 6 == t.size() && (t[at] == '+' || t[at] == '-') && t[at + 3] == ':') {
    int oh, om;
    if (!Digits(t, at + 1, 2, &oh) || !Digits(t, at + 4, 2, &om)) return bad();
    offset_s = (t[at] == '-' ? -1 : 1) * (oh * 3600 + om * 60);
  } else {
    return bad();  // a naive time: Python could not compare it with an aware one either
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) {
    return bad();
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  const time_t utc = timegm(&tm);
  return static_cast<double>(utc) - offset_s + frac;
}

Result<RequestIdentity> IdentityOf(std::string_view body) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(body.data()),
                                            static_cast<int>(body.size()));
  RequestIdentity id;
  const auto bad = [] { return InvalidArgument("the request is not a Fleet protobuf"); };
  for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
    if (WireFormatLite::GetTagFieldNumber(tag) != 1) {
      if (!WireFormatLite::SkipField(&in, tag)) return bad();
      continue;
    }
    // Field 1, the last occurrence winning as protobuf's parsers do.
    if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&id.node_id)) return bad();
      continue;
    }
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      return bad();
    }
    std::string bytes;
    uint32_t len = 0;
    if (!in.ReadVarint32(&len) || !in.ReadString(&bytes, static_cast<int>(len))) return bad();
    // A Node message (its node_id is its field 1) or a public key: the caller knows which.
    id.has_key = true;
    id.public_key = bytes;
    google::protobuf::io::CodedInputStream node(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
    for (uint32_t t; (t = node.ReadTag()) != 0;) {
      if (t == WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_VARINT)) {
        if (!node.ReadVarint64(&id.node_id)) break;
      } else if (!WireFormatLite::SkipField(&node, t)) {
        break;
      }
    }
  }
  if (!in.ConsumedEntireMessage()) return bad();
  return id;
}

Result<std::string> AuthenticateNode(const NodeAuthHeaders& h,
                                     std::chrono::system_clock::time_point now) {
  const auto refuse = [](const std::string& why) {
    return Unauthenticated("Invalid SuperNode authentication: " + why);
  };
  if (h.public_key.empty() || h.signature.empty() || h.timestamp.empty()) {
    return refuse("flwr-public-key, flwr-signature and flwr-timestamp are required");
  }
  std::string pem, signature;
  if (!Base64Decode(h.public_key, &pem)) return refuse("flwr-public-key is not base64");
  if (!Base64Decode(h.signature, &signature)) return refuse("flwr-signature is not base64");
  auto signed_at = ParseIsoTimestamp(h.timestamp);
  if (!signed_at.ok()) return refuse(signed_at.status().message());
  const double age = std::chrono::duration<double>(now.time_since_epoch()).count() - *signed_at;
  if (!(age > -kClockDriftS && age < kTimestampToleranceS + kClockDriftS)) {
    return refuse("flwr-timestamp is outside the allowed window");
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr, EVP_PKEY_free);
  if (!key || EVP_PKEY_base_id(key.get()) != EVP_PKEY_EC) {
    return refuse("flwr-public-key is not a PEM EC public key");
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  const bool verified =
      ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(h.timestamp.data()),
                       h.timestamp.size()) == 1;
  if (!verified) return refuse("the signature does not verify");
  return pem;
}

}  // namespace shoal::flower
