#include "shoal/security/auth/token_store.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shoal/common/clock.h"
#include "shoal/common/file_io.h"

namespace shoal::auth {
namespace {

using nlohmann::json;

constexpr std::string_view kPrefix = "shoal_";
constexpr size_t kIdHex = 12;
constexpr size_t kSecretHex = 64;

std::string Hex(const unsigned char* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Sha256(std::string_view s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return std::string(reinterpret_cast<const char*>(d), sizeof d);
}

Result<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return Internal("RAND_bytes failed: no randomness for a token");
  }
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), bytes);
}

}  // namespace

bool ValidScopeName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return name.front() != '-' && name.back() != '-';
}

Result<TokenRequest> TokenRequestFromJson(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) {
    return InvalidArgument(
        "body: must be a JSON object like {\"role\": \"deployer\", \"namespace\": "
        "\"team-a\", \"name\": \"ci\"}");
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "role" && key != "namespace" && key != "job" && key != "name") {
      return InvalidArgument(key + ": unknown field (role, namespace, job, name)");
    }
    if (!value.is_string()) return InvalidArgument(key + ": must be a string");
  }
  if (!j.contains("role")) {
    return InvalidArgument("role: required (admin, deployer, viewer, invoker or fl-client)");
  }
  auto role = ParseRole(j["role"].get<std::string>());
  if (!role.ok()) return role.status();
  return TokenRequest{j.value("name", ""), *role, j.value("namespace", ""), j.value("job", "")};
}

std::string TokenInfoJson(const TokenInfo& t) {
  json j{{"id", t.id},
         {"name", t.name},
         {"role", RoleName(t.role)},
         {"created_unix_ms", t.created_unix_ms}};
  if (!t.ns.empty()) j["namespace"] = t.ns;
  if (!t.job.empty()) j["job"] = t.job;
  return j.dump();
}

std::string_view BearerToken(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  if (v.size() < 7) return {};
  static constexpr std::string_view kScheme = "bearer ";
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(v[i])) != kScheme[i]) return {};
  }
  v.remove_prefix(kScheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\r' || v.back() == '\n')) {
    v.remove_suffix(1);
  }
  return v;
}

Result<TokenStore::Record> TokenStore::ParseRecord(std::string_view text) {
  const json t = json::parse(text, nullptr, false);
  if (!t.is_object()) return InvalidArgument("a token record is not a JSON object");
  Record r;
  try {
    r.info.id = t.at("id").get<std::string>();
    r.info.name = t.value("name", r.info.id);
    auto role = ParseRole(t.at("role").get<std::string>());
    if (!role.ok()) return InvalidArgument("token " + r.info.id + ": " + role.status().message());
    r.info.role = *role;
    r.info.ns = t.value("namespace", "");
    r.info.job = t.value("job", "");
    r.info.created_unix_ms = t.value("created_unix_ms", int64_t{0});
    const std::string hex = t.at("sha256").get<std::string>();
    if (hex.size() != 64 || !IsLowerHex(hex) || r.info.id.size() != kIdHex) {
      return InvalidArgument("token " + r.info.id + ": malformed record");
    }
    for (size_t i = 0; i < 32; ++i) {
      r.sha256 += static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("malformed token record: ") + e.what());
  }
  return r;
}

std::string TokenStore::RecordText(const Record& r) {
  json t{{"id", r.info.id},
         {"name", r.info.name},
         {"role", RoleName(r.info.role)},
         {"created_unix_ms", r.info.created_unix_ms},
         {"sha256", Hex(reinterpret_cast<const unsigned char*>(r.sha256.data()), r.sha256.size())}};
  if (!r.info.ns.empty()) t["namespace"] = r.info.ns;
  if (!r.info.job.empty()) t["job"] = r.info.job;
  return t.dump();
}

Result<std::pair<CreatedToken, std::string>> TokenStore::MintRecord(const TokenRequest& request) {
  auto minted = Mint(request);
  if (!minted.ok()) return minted.status();
  return std::make_pair(std::move(minted->token), RecordText(minted->record));
}

std::string TokenStore::RecordJson(std::string_view id) const {
  std::shared_lock lock(mu_);
  auto it = records_.find(id);
  return it == records_.end() ? std::string() : RecordText(it->second);
}

Status TokenStore::SetShared(const std::vector<std::string>& records) {
  std::map<std::string, Record, std::less<>> shared;
  std::string bad;
  for (const std::string& text : records) {
    auto r = ParseRecord(text);
    if (!r.ok()) {
      bad += (bad.empty() ? "" : "; ") + r.status().message();
      continue;
    }
    shared[r->info.id] = std::move(*r);
  }
  {
    std::unique_lock lock(mu_);
    shared_ = std::move(shared);
  }
  if (!bad.empty()) return InvalidArgument("shared tokens left out: " + bad);
  return Status::Ok();
}

Status TokenStore::AddShared(const std::string& record) {
  auto r = ParseRecord(record);
  if (!r.ok()) return r.status();
  std::unique_lock lock(mu_);
  shared_[r->info.id] = std::move(*r);
  return Status::Ok();
}

void TokenStore::RemoveShared(std::string_view id) {
  std::unique_lock lock(mu_);
  if (auto it = shared_.find(id); it != shared_.end()) shared_.erase(it);
}

std::vector<TokenInfo> TokenStore::ListShared() const {
  std::vector<TokenInfo> out;
  {
    std::shared_lock lock(mu_);
    for (const auto& [id, r] : shared_) out.push_back(r.info);
  }
  std::sort(out.begin(), out.end(), [](const TokenInfo& a, const TokenInfo& b) {
    return a.created_unix_ms != b.created_unix_ms ? a.created_unix_ms < b.created_unix_ms
                                                  : a.id < b.id;
  });
  return out;
}

Result<std::unique_ptr<TokenStore>> TokenStore::Open(std::string path) {
  std::unique_ptr<TokenStore> store(new TokenStore(std::move(path)));
  std::ifstream in(store->path_);
  if (!in) return store;  // first start: no tokens yet
  struct stat st {};
  if (stat(store->path_.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    spdlog::warn("auth: {} was readable by others (mode {:o}): set to 0600", store->path_,
                 st.st_mode & 0777);
    (void)chmod(store->path_.c_str(), 0600);
  }
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    return InvalidArgument(store->path_ + ": not a Shoal token file");
  }
  for (const json& t : j["tokens"]) {
    auto r = ParseRecord(t.dump());
    if (!r.ok()) return InvalidArgument(store->path_ + ": " + r.status().message());
    store->records_[r->info.id] = std::move(*r);
  }
  return store;
}

Status TokenStore::SaveLocked() const {
  if (path_.empty()) return Status::Ok();  // kept in memory only
  json list = json::array();
  for (const auto& [id, r] : records_) {
    if (!r.info.ephemeral) list.push_back(json::parse(RecordText(r)));
  }
  return WriteFileAtomic(path_, json{{"tokens", std::move(list)}}.dump(2) + "\n", 0600);
}

Result<TokenStore::Minted> TokenStore::Mint(const TokenRequest& req) {
  const bool needs_ns = req.role == Role::kDeployer || req.role == Role::kInvoker;
  const bool needs_job = req.role == Role::kFlClient;
  if (needs_ns && !ValidScopeName(req.ns)) {
    return InvalidArgument(std::string("namespace: role ") + RoleName(req.role) +
                           " needs a namespace (1-63 of a-z, 0-9 and '-'), got '" + req.ns + "'");
  }
  if (!needs_ns && !req.ns.empty()) {
    return InvalidArgument(
        std::string("namespace: only deployer and invoker tokens have one, not ") +
        RoleName(req.role));
  }
  if (needs_job && !ValidScopeName(req.job)) {
    return InvalidArgument("job: role fl-client needs an FL job name, got '" + req.job + "'");
  }
  if (!needs_job && !req.job.empty()) {
    return InvalidArgument(std::string("job: only fl-client tokens have one, not ") +
                           RoleName(req.role));
  }
  if (req.name.size() > 128) return InvalidArgument("name: at most 128 characters");
  for (char c : req.name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgument("name: control characters are not allowed");
    }
  }
  auto id = RandomHex(kIdHex / 2);
  if (!id.ok()) return id.status();
  auto secret = RandomHex(kSecretHex / 2);
  if (!secret.ok()) return secret.status();

  Record r;
  r.info.id = *id;
  r.info.name = req.name.empty() ? *id : req.name;
  r.info.role = req.role;
  r.info.ns = req.ns;
  r.info.job = req.job;
  r.info.created_unix_ms = UnixMs();
  r.sha256 = Sha256(*secret);
  CreatedToken out{r.info, std::string(kPrefix) + *id + "_" + *secret};
  return Minted{std::move(out), std::move(r)};
}

Result<CreatedToken> TokenStore::Create(const TokenRequest& req, bool ephemeral) {
  auto minted = Mint(req);
  if (!minted.ok()) return minted.status();
  Record r = std::move(minted->record);
  r.info.ephemeral = ephemeral;
  CreatedToken out = std::move(minted->token);
  out.info.ephemeral = ephemeral;
  const std::string id = r.info.id;

  std::unique_lock lock(mu_);
  if (records_.count(id) != 0) return Internal("token id collision: try again");
  records_[id] = std::move(r);
  if (!ephemeral) {
    if (Status st = SaveLocked(); !st.ok()) {
      records_.erase(id);
      return st;
    }
  }
  return out;
}

Status TokenStore::Revoke(std::string_view id) {
  std::unique_lock lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return NotFound("token '" + std::string(id) + "' not found");
  Record saved = it->second;
  records_.erase(it);
  if (saved.info.ephemeral) return Status::Ok();
  if (Status st = SaveLocked(); !st.ok()) {
    records_[saved.info.id] = std::move(saved);
    return st;
  }
  return Status::Ok();
}

std::vector<TokenInfo> TokenStore::List() const {
  std::shared_lock lock(mu_);
  std::vector<TokenInfo> out;
  for (const auto& [id, r] : records_) {
    if (!r.info.ephemeral) out.push_back(r.info);
  }
  std::sort(out.begin(), out.end(), [](const TokenInfo& a, const TokenInfo& b) {
    return a.created_unix_ms != b.created_unix_ms ? a.created_unix_ms < b.created_unix_ms
                                                  : a.id < b.id;
  });
  return out;
}

bool TokenStore::HasRole(Role role) const {
  std::shared_lock lock(mu_);
  for (const auto& [id, r] : records_) {
    if (!r.info.ephemeral && r.info.role == role) return true;
  }
  return false;
}

Result<Principal> TokenStore::Authenticate(std::string_view token) const {
  static const Status kInvalid =
      Unauthenticated("the bearer token is not valid (malformed, unknown or revoked)");
  if (token.size() != kPrefix.size() + kIdHex + 1 + kSecretHex || !token.starts_with(kPrefix) ||
      token[kPrefix.size() + kIdHex] != '_') {
    return kInvalid;
  }
  const std::string_view id = token.substr(kPrefix.size(), kIdHex);
  const std::string digest = Sha256(token.substr(kPrefix.size() + kIdHex + 1));
  std::shared_lock lock(mu_);
  const Record* rec = nullptr;
  if (auto it = records_.find(id); it != records_.end()) {
    rec = &it->second;
  } else if (auto sit = shared_.find(id); sit != shared_.end()) {
    rec = &sit->second;
  }
  // An unknown id costs the same comparison as a known one.
  static const std::string kNoMatch(32, '\0');
  const std::string& want = rec != nullptr ? rec->sha256 : kNoMatch;
  const bool match = CRYPTO_memcmp(digest.data(), want.data(), 32) == 0;
  if (rec == nullptr || !match) return kInvalid;
  const TokenInfo& info = rec->info;
  return Principal{info.id, info.name, info.role, info.ns, info.job};
}

}  // namespace shoal::auth
