#include "shoal/control/controller/cluster_fl_jobs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "shoal/common/clock.h"
#include "shoal/control/controller/deploy_record.h"

namespace shoal::controller {

ClusterFlJobs::ClusterFlJobs(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                             cluster::NodeDirectory* nodes)
    : etcd_(etcd),
      keys_(std::move(keys)),
      nodes_(nodes),
      // Also every few seconds: a move that failed while etcd was away is tried again.
      mover_("fl jobs", std::chrono::seconds(3), [this] { return MoveAll(); }) {}

ClusterFlJobs::~ClusterFlJobs() { StopMoving(); }

std::string ClusterFlJobs::ChooseTop(const std::vector<cluster::NodeEntry>& nodes,
                                     const std::string& except) const {
  const cluster::NodeEntry* best = nullptr;
  for (const auto& n : nodes) {
    if (n.record.name == except) continue;
    if (best == nullptr || n.record.cores > best->record.cores ||
        (n.record.cores == best->record.cores &&
         n.record.fl_jobs.size() < best->record.fl_jobs.size())) {
      best = &n;  // nodes come by name: ties keep the first
    }
  }
  return best == nullptr ? std::string() : best->record.name;
}

Result<std::vector<DeployedJob>> ClusterFlJobs::Deploy(const std::vector<FlJobSpec>& specs) {
  const auto nodes = nodes_->List();
  if (nodes.empty()) {
    return Unavailable("no node is registered in the cluster to run an FL job's top");
  }
  std::vector<DeployedJob> out;
  for (const FlJobSpec& spec : specs) {
    auto read = [&](cluster::FlJobRecord* r) -> Result<int64_t> {
      auto now = etcd_->Get(keys_.Job(spec.name));
      if (!now.ok()) return now.status();
      if (!now->kvs.empty()) {
        auto existing = cluster::FlJobRecord::FromJson(now->kvs[0].value);
        if (existing.ok()) {
          *r = *existing;
          return now->kvs[0].mod_revision;
        }
      }
      return int64_t{0};
    };
    auto create = [&](cluster::FlJobRecord& r) {
      r.top = ChooseTop(nodes, "");
      r.created_unix_ms = UnixMs();
      return Status::Ok();
    };
    auto deployed = DeployRecord<cluster::FlJobRecord>(*etcd_, keys_.Job(spec.name), spec,
                                                       "FL job " + spec.name, read, create);
    if (!deployed.ok()) return deployed.status();
    const auto& [r, created] = *deployed;
    spdlog::info("fl jobs: {} {} (generation {}), its top on node {}", spec.name,
                 created ? "deployed" : "re-deployed", r.generation, r.top);
    out.push_back({r, created});
  }
  return out;
}

Status ClusterFlJobs::Delete(const std::string& name) {
  SHOAL_RETURN_IF_ERROR(etcd_->DeleteExisting(keys_.Job(name), "no FL job " + name));
  (void)etcd_->Delete(keys_.JobState(name));
  spdlog::info("fl jobs: {} deleted", name);
  return Status::Ok();
}

Result<std::vector<ClusterJob>> ClusterFlJobs::List() {
  auto records = etcd_->GetPrefix(keys_.Jobs());
  if (!records.ok()) return records.status();
  auto states = etcd_->GetPrefix(keys_.JobStates());
  if (!states.ok()) return states.status();
  std::map<std::string, cluster::FlJobState> by_name;
  for (const auto& kv : states->kvs) {
    auto s = cluster::FlJobState::FromJson(kv.value);
    if (s.ok()) by_name[kv.key.substr(keys_.JobStates().size())] = *s;
  }
  std::vector<ClusterJob> out;
  for (const auto& kv : records->kvs) {
    auto r = cluster::FlJobRecord::FromJson(kv.value);
    if (!r.ok()) continue;
    ClusterJob j{*r, std::nullopt};
    if (auto it = by_name.find(r->name); it != by_name.end()) j.state = it->second;
    out.push_back(std::move(j));
  }
  return out;
}

Result<ClusterJob> ClusterFlJobs::Get(const std::string& name) {
  auto all = List();
  if (!all.ok()) return all.status();
  for (auto& j : *all) {
    if (j.record.name == name) return std::move(j);
  }
  return NotFound("no FL job " + name);
}

void ClusterFlJobs::StartMoving() { mover_.Start(); }

void ClusterFlJobs::StopMoving() { mover_.Stop(); }

void ClusterFlJobs::NodesChanged() { mover_.Poke(); }

Status ClusterFlJobs::MoveAll() {
  const auto nodes = nodes_->List();
  if (nodes.empty()) return Status::Ok();  // nowhere to go: they wait for a node
  auto records = etcd_->GetPrefix(keys_.Jobs());
  if (!records.ok()) return records.status();
  for (const auto& kv : records->kvs) {
    auto r = cluster::FlJobRecord::FromJson(kv.value);
    if (!r.ok()) continue;
    const bool live = std::any_of(nodes.begin(), nodes.end(), [&](const cluster::NodeEntry& n) {
      return n.record.name == r->top;
    });
    if (live) continue;
    const std::string from = r->top;
    r->top = ChooseTop(nodes, from);
    if (r->top.empty()) continue;
    r->moved_from = from;
    r->updated_unix_ms = UnixMs();
    // Only if nobody changed it since it was read (a re-deploy, another leader's move).
    auto written = etcd_->PutIfModRevision(kv.key, r->ToJson(), kv.mod_revision);
    if (!written.ok()) return written.status();
    if (*written) {
      spdlog::warn(
          "fl jobs: {}: its top, node {}, left the cluster: node {} takes it over from the "
          "checkpoint store",
          r->name, from, r->top);
    }
  }
  return Status::Ok();
}

}  // namespace shoal::controller
