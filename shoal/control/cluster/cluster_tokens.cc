#include "shoal/control/cluster/cluster_tokens.h"

#include <spdlog/spdlog.h>

namespace shoal::cluster {

ClusterTokens::ClusterTokens(EtcdClient* etcd, ClusterKeys keys, auth::TokenStore* store)
    : etcd_(etcd),
      keys_(std::move(keys)),
      store_(store),
      mirror_(etcd, keys_.Tokens(), [store](const PrefixMirror::Snapshot& now) {
        std::vector<std::string> records;
        records.reserve(now.size());
        for (const auto& [id, record] : now) records.push_back(record);
        if (Status st = store->SetShared(records); !st.ok()) {
          spdlog::warn("auth: the cluster's tokens: {}", st.message());
        }
      }) {}

Status ClusterTokens::Start() { return mirror_.Start(); }

Result<auth::CreatedToken> ClusterTokens::Create(const auth::TokenRequest& request) {
  // Minted (and validated) as the store makes its own; its record goes to etcd, then it is
  // accepted here as a shared one, like every other cluster token.
  auto minted = auth::TokenStore::MintRecord(request);
  if (!minted.ok()) return minted.status();
  auto& [made, record] = *minted;
  auto put = etcd_->PutIfAbsent(keys_.Token(made.info.id), record, 0);
  if (!put.ok()) return put.status();
  if (!*put) return Internal("token id collision in the cluster: try again");
  if (Status st = store_->AddShared(record); !st.ok()) return st;
  return std::move(made);
}

Status ClusterTokens::Revoke(const std::string& id) {
  SHOAL_RETURN_IF_ERROR(etcd_->DeleteExisting(keys_.Token(id), "token '" + id + "' not found"));
  store_->RemoveShared(id);
  return Status::Ok();
}

std::vector<auth::TokenInfo> ClusterTokens::List() const { return store_->ListShared(); }

Result<size_t> ClusterTokens::Import(const auth::TokenStore& seed) {
  size_t added = 0;
  for (const auto& t : seed.List()) {
    const std::string record = seed.RecordJson(t.id);
    auto put = etcd_->PutIfAbsent(keys_.Token(t.id), record, 0);
    if (!put.ok()) return put.status();
    if (*put) ++added;
    (void)store_->AddShared(record);
  }
  return added;
}

Result<std::string> ClusterTokens::EnsureAdmin() {
  for (const auto& t : store_->ListShared()) {
    if (t.role == auth::Role::kAdmin) return std::string();
  }
  // One controller makes it: the one whose claim etcd takes first.
  auto claimed = etcd_->PutIfAbsent(keys_.AdminBootstrap(), "claimed", 0);
  if (!claimed.ok()) return claimed.status();
  if (!*claimed) return std::string();
  auto made = Create({"admin", auth::Role::kAdmin, "", ""});
  if (!made.ok()) {
    (void)etcd_->Delete(keys_.AdminBootstrap());
    return made.status();
  }
  return made->token;
}

}  // namespace shoal::cluster
