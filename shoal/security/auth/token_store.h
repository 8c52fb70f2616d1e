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
#include <utility>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/security/auth/role.h"

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
  // Loads `path` (a missing file is an empty store; "" a store kept in memory only).
  // kInvalidArgument for a damaged file.
  static Result<std::unique_ptr<TokenStore>> Open(std::string path);

  // Validates the request (scope fields match the role) and adds a token; persisted unless
  // `ephemeral`.
  Result<CreatedToken> Create(const TokenRequest& request, bool ephemeral = false);
  // kNotFound for an unknown id.
  Status Revoke(std::string_view id);
  std::vector<TokenInfo> List() const;  // persistent tokens, by creation time
  bool HasRole(Role role) const;
  // kUnauthenticated (401) for a malformed, unknown or revoked token; never says which. A
  // token is looked up among this store's own records, then among the shared ones.
  Result<Principal> Authenticate(std::string_view token) const;

  // Shared records: tokens kept elsewhere (a cluster's, in etcd) that this store also accepts.
  // A record is the JSON object tokens.json holds for one token (id, name, role, scope,
  // created_unix_ms, sha256 of the secret): never the secret.
  std::string RecordJson(std::string_view id) const;  // "" for an unknown id
  // A new token validated as Create does, with its record, held nowhere (a cluster's tokens
  // are kept in etcd): the secret token once, and the record to store.
  static Result<std::pair<CreatedToken, std::string>> MintRecord(const TokenRequest& request);
  // Replaces the shared set; a malformed record is left out and named in the result's message
  // (the others are taken).
  Status SetShared(const std::vector<std::string>& records);
  Status AddShared(const std::string& record);
  void RemoveShared(std::string_view id);
  std::vector<TokenInfo> ListShared() const;  // by creation time

  const std::string& path() const { return path_; }

 private:
  struct Record {
    TokenInfo info;
    std::string sha256;  // 32 raw bytes of SHA-256(secret)
  };
  explicit TokenStore(std::string path) : path_(std::move(path)) {}
  // One record as tokens.json holds it (JSON object text), both ways.
  struct Minted {
    CreatedToken token;
    Record record;
  };
  static Result<Minted> Mint(const TokenRequest& request);
  static Result<Record> ParseRecord(std::string_view text);
  static std::string RecordText(const Record& r);
  Status SaveLocked() const;

  std::string path_;
  mutable std::shared_mutex mu_;
  std::map<std::string, Record, std::less<>> records_;  // by id
  std::map<std::string, Record, std::less<>> shared_;   // by id
};

// A token request as the control APIs take it (POST /v1/tokens): a JSON object of strings
// {"role", "namespace", "job", "name"}; kInvalidArgument naming the field otherwise. The scope
// itself is checked by TokenStore::Create.
Result<TokenRequest> TokenRequestFromJson(std::string_view body);
// A token's public fields as the control APIs list them (JSON object text; never a secret).
std::string TokenInfoJson(const TokenInfo& t);

// The token in an Authorization header value ("Bearer <token>", scheme case-insensitive);
// empty when the value is not a bearer credential.
std::string_view BearerToken(std::string_view authorization);

// A name for a namespace, job or token: 1-63 of [a-z0-9-], starting and ending alphanumeric
// (Kubernetes' DNS label). Scope fields must be such names.
bool ValidScopeName(std::string_view name);

}  // namespace shoal::auth
