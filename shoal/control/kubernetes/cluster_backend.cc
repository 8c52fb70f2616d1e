#include "shoal/control/kubernetes/cluster_backend.h"

#include "shoal/common/clock.h"
#include "shoal/control/cluster/node_signals.h"
#include "shoal/control/controller/controller_api.h"
#include "shoal/control/node/manifest.h"

namespace shoal::kubernetes {

namespace {
constexpr int64_t kStaleSignalsMs = 10000;  // a node's signals older than this are not counted
}

Status ClusterBackend::Apply(const std::string& kind, const std::string& manifest) {
  auto parsed = ParseManifests(manifest, NodeConfig{});
  if (!parsed.ok()) return parsed.status();
  if (kind == "FLJob") {
    if (parsed->jobs.size() != 1) return InvalidArgument("want one FLJob document");
    auto deployed = jobs_->Deploy(parsed->jobs);
    return deployed.ok() ? Status::Ok() : deployed.status();
  }
  if (parsed->functions.size() != 1) return InvalidArgument("want one Function document");
  auto deployed = functions_->Deploy(parsed->functions[0].manifest);
  return deployed.ok() ? Status::Ok() : deployed.status();
}

Status ClusterBackend::Delete(const std::string& kind, const std::string& name) {
  return kind == "FLJob" ? jobs_->Delete(name) : functions_->Delete(name);
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
  if (auto placements = functions_->Placements(name); placements.ok()) {
    int64_t desired = 0;
    for (const auto& [node, p] : *placements) desired += p.min_scale;
    o->desired = desired;
  }
  if (auto signals = etcd_->GetPrefix(keys_.Signals(name)); signals.ok()) {
    int64_t ready = 0;
    const int64_t now_ms = UnixMs();
    for (const auto& kv : signals->kvs) {
      auto s = cluster::NodeSignals::FromJson(kv.value);
      if (s.ok() && now_ms - s->unix_ms <= kStaleSignalsMs) ready += s->ready;
    }
    o->ready = ready;
  }
}

}  // namespace shoal::kubernetes
