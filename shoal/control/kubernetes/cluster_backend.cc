#include "shoal/control/kubernetes/cluster_backend.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "shoal/control/controller/controller_api.h"
#include "shoal/control/controller/node_views.h"
#include "shoal/control/node/manifest.h"

namespace shoal::kubernetes {

Status ClusterBackend::Apply(const std::string& kind, const std::string& manifest) {
  auto parsed = ParseManifests(manifest, NodeConfig{});
  if (!parsed.ok()) return parsed.status();
  std::string name;
  if (kind == "FLJob") {
    if (parsed->jobs.size() != 1) return InvalidArgument("want one FLJob document");
    auto deployed = jobs_->Deploy(parsed->jobs);
    if (!deployed.ok()) return deployed.status();
    name = parsed->jobs[0].name;
  } else {
    if (parsed->functions.size() != 1) return InvalidArgument("want one Function document");
    auto deployed = functions_->Deploy(parsed->functions[0].manifest);
    if (!deployed.ok()) return deployed.status();
    name = parsed->functions[0].name;
  }
  auto put = etcd_->Put(ManagedKey(kind, name), "1");
  return put.ok() ? Status::Ok() : put.status();
}

std::vector<std::string> ClusterBackend::Managed(const std::string& kind) {
  std::vector<std::string> names;
  auto kvs = etcd_->GetPrefix(ManagedKey(kind));
  if (!kvs.ok()) return names;  // etcd away: nothing is deleted on that
  for (const auto& kv : kvs->kvs) names.push_back(kv.key.substr(ManagedKey(kind).size()));
  return names;
}

Status ClusterBackend::Delete(const std::string& kind, const std::string& name) {
  Status st = kind == "FLJob" ? jobs_->Delete(name) : functions_->Delete(name);
  if (st.ok() || st.code() == StatusCode::kNotFound) (void)etcd_->Delete(ManagedKey(kind, name));
  return st;
}

bool ClusterBackend::Exists(const std::string& kind, const std::string& name) {
  if (kind == "FLJob") return jobs_->Get(name).ok();
  auto all = functions_->List();
  if (!all.ok()) return true;  // etcd away: do not redeploy on that
  for (const auto& f : *all) {
    if (f.name == name) return true;
  }
  return false;
}

void ClusterBackend::Observe(const std::string& kind, const std::string& name, Observed* o) {
  if (kind == "FLJob") {
    auto job = jobs_->Get(name);
    if (!job.ok()) return;  // keep what was seen last
    o->job = nlohmann::json::parse(controller::ClusterJobJson(*job), nullptr, false);
    return;
  }
  auto placements = functions_->Placements(name);
  if (!placements.ok()) return;
  int64_t desired = 0;
  std::vector<cluster::NodeEntry> placed;
  for (const auto& [node, p] : *placements) {
    desired += p.min_scale;
    for (const auto& n : nodes_->List()) {
      if (n.record.name == node) placed.push_back(n);
    }
  }
  o->desired = desired;
  std::string authorization;
  {
    std::lock_guard l(mu_);
    if (authorization_.empty()) {
      // One viewer token per operator run (a cluster token: the nodes accept it once their
      // watch has it), revoked when it stops.
      auto made = tokens_->Create(
          {"kubernetes-operator-" + std::to_string(getpid()), auth::Role::kViewer, "", ""});
      if (!made.ok()) {
        spdlog::warn("kubernetes: a viewer token for the nodes' instance counts: {}",
                     made.status().message());
        return;
      }
      token_id_ = made->info.id;
      authorization_ = "Bearer " + made->token;
    }
    authorization = authorization_;
  }
  const nlohmann::json st = controller::ClusterFunctionStatus(placed, name, authorization);
  if (st.contains("ready") && st["ready"].is_number_integer()) o->ready = st["ready"];
}

void ClusterBackend::Close() {
  std::lock_guard l(mu_);
  if (token_id_.empty()) return;
  if (Status st = tokens_->Revoke(token_id_); !st.ok()) {
    spdlog::warn("kubernetes: revoking the operator's viewer token: {}", st.message());
  }
  token_id_.clear();
  authorization_.clear();
}

}  // namespace shoal::kubernetes
