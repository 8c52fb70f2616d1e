#include "shoal/fl/flower/objects.h"

#include <openssl/sha.h>

#include <charconv>
#include <cstdio>

namespace shoal::flower {

std::string ObjectId(std::string_view content) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(content.data()), content.size(), d);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * SHA256_DIGEST_LENGTH, '0');
  for (size_t i = 0; i < SHA256_DIGEST_LENGTH; ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
  return out;
}

bool IsObjectId(std::string_view id) {
  if (id.size() != 2 * SHA256_DIGEST_LENGTH) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

std::string MakeObject(std::string_view type, const std::vector<std::string>& children,
                       std::string_view body) {
  std::string out(type);
  out += ' ';
  for (size_t i = 0; i < children.size(); ++i) {
    if (i > 0) out += ',';
    out += children[i];
  }
  out += ' ';
  out += std::to_string(body.size());
  out += '\0';
  out += body;
  return out;
}

Result<ObjectView> ParseObject(std::string_view content) {
  const size_t nul = content.find('\0');
  if (nul == std::string_view::npos) return InvalidArgument("object: no head/body divider");
  const std::string_view head = content.substr(0, nul);
  const size_t s1 = head.find(' ');
  const size_t s2 = s1 == std::string_view::npos ? s1 : head.find(' ', s1 + 1);
  if (s2 == std::string_view::npos || head.find(' ', s2 + 1) != std::string_view::npos) {
    return InvalidArgument("object: the head is not '<type> <children> <length>'");
  }
  ObjectView v;
  v.type = head.substr(0, s1);
  std::string_view kids = head.substr(s1 + 1, s2 - s1 - 1);
  while (!kids.empty()) {
    const size_t c = kids.find(',');
    const std::string_view id = kids.substr(0, c);
    if (!IsObjectId(id)) return InvalidArgument("object: a child id is not a SHA-256 hex");
    v.children.push_back(id);
    if (c == std::string_view::npos) break;
    kids.remove_prefix(c + 1);
  }
  const std::string_view len = head.substr(s2 + 1);
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(len.data(), len.data() + len.size(), n);
  if (ec != std::errc() || p != len.data() + len.size()) {
    return InvalidArgument("object: the body length is not a number");
  }
  v.body = content.substr(nul + 1);
  if (v.body.size() != n) return InvalidArgument("object: the body length does not match");
  return v;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          // Names are ASCII in practice; a non-ASCII byte is written as its code unit, as
          // json.dumps does for Latin-1 (UTF-8 sequences are not decoded here).
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace shoal::flower
