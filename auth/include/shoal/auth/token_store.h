// Bearer tokens of the control plane. A token reads "shoal_<id>_<secret>": the id (12 hex
// digits) finds its record, the secret (64 hex digits, 256 random bits) is never stored: only
// its SHA-256 is, in <state>/tokens.json (mode 0600), and a presented secret is compared with
// it in constant time. Records persist across restarts; ephemeral ones (handed to instances)
// live in memory only. Thread-safe: the gateway loops and the control API share one store.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/auth/role.h"
#include "shoal/common/status.h"

namespace shoal::auth {

struct TokenInfo {
  std::string id;
  std::string name;
  Role role = Role::kViewer;
  std::string ns;   // deployer, invoker
  std::string job;  // fl-client
  int64_t created_unix_ms = 0;
  bool ephemeral = false;
};

struct TokenRequest {
  std::string name;  // "" = the id
  Role role = Role::kViewer;
  std::string ns;
  std::string job;
};

struct CreatedToken {
  TokenInfo info;
  std::string token;  // the full secret token: shown once, never stored
};

class TokenStore {
 public:
  // Loads `path` (a missing file is an empty store). kInvalidArgument for a damaged file.
  static Result<std::unique_ptr<TokenStore>> Open(std::string path);

  // Validates the request (scope fields match the role) and adds a token; persisted unless
  // `ephemeral`.
  Result<CreatedToken> Create(const TokenRequest& request, bool ephemeral = false);
  // kNotFound for an unknown id.
  Status Revoke(std::string_view id);
  std::vector<TokenInfo> List() const;  // persistent tokens, by creation time
  bool HasRole(Role role) const;
  // kUnauthenticated (401) for a malformed, unknown or revoked token; never says which.
  Result<Principal> Authenticate(std::string_view token) const;

  const std::string& path() const { return path_; }

 private:
  struct Record {
    TokenInfo info;
    std::string sha256;  // 32 raw bytes of SHA-256(secret)
  };
  explicit TokenStore(std::string path) : path_(std::move(path)) {}
  Status SaveLocked() const;

  std::string path_;
  mutable std::shared_mutex mu_;
  std::map<std::string, Record, std::less<>> records_;  // by id
};

// The token in an Authorization header value ("Bearer <token>", scheme case-insensitive);
// empty when the value is not a bearer credential.
std::string_view BearerToken(std::string_view authorization);

// A name for a namespace, job or token: 1-63 of [a-z0-9-], starting and ending alphanumeric
// (Kubernetes' DNS label). Scope fields must be such names.
bool ValidScopeName(std::string_view name);

}  // namespace shoal::auth
