// The cluster's bearer tokens, kept in etcd (<prefix>/tokens/<id>: the hashed record, never the
// secret). The controllers issue and revoke them; every controller and every node mirrors them
// into its TokenStore's shared set, so one token works on the controller API, on any node's
// control API and gateway, and at the top of an FL job wherever its clients enter. A node's own
// tokens (tokens.json) stay that node's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shoal/control/cluster/etcd_client.h"
#include "shoal/control/cluster/node_record.h"
#include "shoal/control/cluster/prefix_mirror.h"
#include "shoal/security/auth/token_store.h"

namespace shoal::cluster {

class ClusterTokens {
 public:
  // `store` accepts the cluster's tokens once Start has read them (and then as they change).
  ClusterTokens(EtcdClient* etcd, ClusterKeys keys, auth::TokenStore* store);
  Status Start();
  bool started() const { return mirror_.started(); }

  // A controller's calls. Create validates as TokenStore::Create does and returns the secret
  // token once; it is accepted here at once and elsewhere as soon as their watch delivers it.
  Result<auth::CreatedToken> Create(const auth::TokenRequest& request);
  Status Revoke(const std::string& id);  // kNotFound for an id the cluster does not have
  std::vector<auth::TokenInfo> List() const;
  // Writes `seed`'s tokens (a controller's tokens.json: a Kubernetes Secret) into the cluster
  // where absent; how many were new.
  Result<size_t> Import(const auth::TokenStore& seed);
  // The first controller of a cluster makes its admin token (etcd decides which one): the
  // secret token when this call made it, "" when the cluster already has an admin.
  Result<std::string> EnsureAdmin();

 private:
  EtcdClient* etcd_;
  ClusterKeys keys_;
  auth::TokenStore* store_;
  PrefixMirror mirror_;
};

}  // namespace shoal::cluster
