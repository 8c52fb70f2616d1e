#include "shoal/control/controller/cluster_functions.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "shoal/common/clock.h"
#include "shoal/common/config.h"
#include "shoal/control/controller/deploy_record.h"
#include "shoal/control/node/manifest.h"
#include "shoal/control/placement/placement.h"

namespace shoal::controller {
namespace {

// Why `spec` fits on no node of `nodes` ("" when one can hold it).
std::string FitsNowhere(const FunctionSpec& spec, const std::vector<cluster::NodeEntry>& nodes) {
  if (nodes.empty()) return "no node is registered in the cluster";
  double cores = 0;
  uint64_t mem = 0;
  uint32_t gpus = 0;
  for (const auto& n : nodes) {
    if (n.record.cores >= spec.cpu && n.record.memory_mib * (1ull << 20) >= spec.memory_bytes &&
        n.record.gpus >= spec.gpu) {
      return "";
    }
    cores = std::max<double>(cores, n.record.cores);
    mem = std::max<uint64_t>(mem, n.record.memory_mib);
    gpus = std::max(gpus, n.record.gpus);
  }
  if (spec.cpu > cores) {
    return "spec.resources.cpu: " + std::to_string(static_cast<int>(spec.cpu)) +
           " cores fit on no node (the largest has " + std::to_string(static_cast<int>(cores)) +
           ")";
  }
  if (spec.memory_bytes > mem * (1ull << 20)) {
    return "spec.resources.memory: " + std::to_string(spec.memory_bytes >> 20) +
           " MiB fit on no node (the largest has " + std::to_string(mem) + " MiB)";
  }
  return "spec.resources.gpu: " + std::to_string(spec.gpu) + " GPU(s) fit on no node (the most " +
         "any node has is " + std::to_string(gpus) + ")";
}

}  // namespace

ClusterFunctions::ClusterFunctions(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                                   cluster::NodeDirectory* nodes)
    : etcd_(etcd),
      keys_(std::move(keys)),
      nodes_(nodes),
      // Also every few seconds: a write that failed while etcd was away is tried again.
      placer_("placement", std::chrono::seconds(3), [this] { return PlaceAll(); }) {}

ClusterFunctions::~ClusterFunctions() { StopPlacing(); }

Result<std::vector<DeployedFunction>> ClusterFunctions::Deploy(std::string_view manifests) {
  auto parsed = ParseFunctionManifests(manifests, NodeConfig{});
  if (!parsed.ok()) return parsed.status();
  if (parsed->empty()) return InvalidArgument("no Function document in the request body");
  const auto nodes = nodes_->List();
  for (const auto& spec : *parsed) {
    if (std::string why = FitsNowhere(spec, nodes); !why.empty()) {
      return InvalidArgument(spec.name + ": " + why);
    }
  }
  std::vector<DeployedFunction> out;
  for (const auto& spec : *parsed) {
    // Optimistic: read, decide the id and generation, write only if nothing changed between.
    std::set<uint32_t> taken;
    auto read = [&](cluster::ClusterFunction* f) -> Result<int64_t> {
      auto all = etcd_->GetPrefix(keys_.Functions());
      if (!all.ok()) return all.status();
      int64_t mod_revision = 0;
      taken.clear();
      for (const auto& kv : all->kvs) {
        auto existing = cluster::ClusterFunction::FromJson(kv.value);
        if (!existing.ok()) continue;
        if (existing->name == spec.name) {
          *f = *existing;
          mod_revision = kv.mod_revision;
        } else {
          taken.insert(existing->id);
        }
      }
      return mod_revision;
    };
    auto create = [&](cluster::ClusterFunction& f) -> Status {
      f.id = 0;
      for (uint32_t id = cluster::kClusterFunctionIdFirst; id <= cluster::kClusterFunctionIdLast;
           ++id) {
        if (!taken.count(id)) {
          f.id = id;
          break;
        }
      }
      if (f.id == 0) return ResourceExhausted("no free cluster function id");
      f.created_unix_ms = UnixMs();
      return Status::Ok();
    };
    auto deployed = DeployRecord<cluster::ClusterFunction>(*etcd_, keys_.Function(spec.name), spec,
                                                           spec.name, read, create);
    if (!deployed.ok()) return deployed.status();
    const auto& [f, created] = *deployed;
    spdlog::info("functions: {} {} (id {}, generation {})", spec.name,
                 created ? "deployed" : "re-deployed", f.id, f.generation);
    out.push_back({f, created});
  }
  return out;
}

Status ClusterFunctions::Delete(const std::string& name) {
  SHOAL_RETURN_IF_ERROR(etcd_->DeleteExisting(keys_.Function(name), "no function " + name));
  spdlog::info("functions: {} deleted", name);
  return Status::Ok();
}

Result<std::vector<cluster::ClusterFunction>> ClusterFunctions::List() {
  auto all = etcd_->GetPrefix(keys_.Functions());
  if (!all.ok()) return all.status();
  std::vector<cluster::ClusterFunction> out;
  for (const auto& kv : all->kvs) {
    auto f = cluster::ClusterFunction::FromJson(kv.value);
    if (f.ok()) out.push_back(std::move(*f));
  }
  return out;
}

Result<std::vector<std::pair<std::string, cluster::Placement>>> ClusterFunctions::Placements(
    const std::string& function) {
  auto all = etcd_->GetPrefix(keys_.Placements(function));
  if (!all.ok()) return all.status();
  std::vector<std::pair<std::string, cluster::Placement>> out;
  for (const auto& kv : all->kvs) {
    auto p = cluster::Placement::FromJson(kv.value);
    if (p.ok()) out.emplace_back(kv.key.substr(keys_.Placements(function).size()), *p);
  }
  return out;
}

void ClusterFunctions::StartPlacing() {
  if (placer_.running()) return;
  auto watch = etcd_->WatchPrefix(
      keys_.Functions(), 0,
      [this](const std::vector<cluster::WatchEvent>&, int64_t) { NodesChanged(); },
      [this](int64_t) { NodesChanged(); });
  {
    std::lock_guard lock(mu_);
    watch_ = std::move(watch);
  }
  placer_.Start();
}

void ClusterFunctions::StopPlacing() {
  std::unique_ptr<cluster::EtcdWatch> watch;
  {
    std::lock_guard lock(mu_);
    watch = std::move(watch_);
  }
  watch.reset();
  placer_.Stop();
}

void ClusterFunctions::SetWarm(const std::string& function, uint32_t warm) {
  {
    std::lock_guard lock(mu_);
    auto it = warm_.find(function);
    if (it != warm_.end() && it->second == warm) return;
    warm_[function] = warm;
  }
  placer_.Poke();
}

uint32_t ClusterFunctions::Warm(const std::string& function) {
  std::lock_guard lock(mu_);
  auto it = warm_.find(function);
  return it == warm_.end() ? 0 : it->second;
}

void ClusterFunctions::NodesChanged() { placer_.Poke(); }

Status ClusterFunctions::PlaceAll() {
  auto functions = List();
  if (!functions.ok()) return functions.status();
  auto current = etcd_->GetPrefix(keys_.prefix() + "/placements/");
  if (!current.ok()) return current.status();
  std::map<std::string, std::string> have;  // key -> value
  for (const auto& kv : current->kvs) have[kv.key] = kv.value;
  const auto nodes = nodes_->List();
  ClusterModel model;
  for (const auto& n : nodes) {
    const size_t i =
        model.AddNode(n.record.name,
                      Resources{static_cast<double>(n.record.cores),
                                static_cast<double>(n.record.memory_mib), n.record.gpus},
                      n.record.cold_start_ms / 1000.0);
    for (const auto& c : n.record.cached_functions) model.node(i).cached.insert(c);
  }
  std::map<std::string, std::string> want;
  // The oldest functions are placed first: a new one takes only the room they leave, never
  // theirs (a deploy must not move what already runs).
  std::stable_sort(functions->begin(), functions->end(),
                   [](const cluster::ClusterFunction& a, const cluster::ClusterFunction& b) {
                     if (a.created_unix_ms != b.created_unix_ms) {
                       return a.created_unix_ms < b.created_unix_ms;
                     }
                     return a.id < b.id;
                   });
  for (const auto& f : *functions) {
    auto specs = ParseFunctionManifests(f.manifest, NodeConfig{});
    if (!specs.ok() || specs->size() != 1) continue;
    const FunctionSpec& spec = (*specs)[0];
    // Each of its max_scale instances in turn through Place(), the simulator's cold-start-aware
    // placement (a node with its code cached, then the cheapest measured cold start, then the
    // most free cores), over a model of the registered nodes from which every instance placed
    // so far (of this and the functions before it) is taken: the placement holds only what the
    // nodes have room for, and spreads instances as their free cores even out.
    const Resources need{spec.cpu, static_cast<double>(spec.memory_bytes) / (1 << 20), spec.gpu};
    // An instance that reserves no CPU still takes a millionth of a core from the model where
    // there is one, so that Place()'s tie-break (most free cores) spreads such instances over
    // the nodes instead of stacking them on the first.
    Resources taken = need;
    if (taken.cores == 0) taken.cores = 1e-6;
    const uint32_t max_total =
        spec.max_scale == 0 ? NodeConfig{}.default_max_scale : spec.max_scale;
    std::vector<uint32_t> count(nodes.size(), 0);
    uint32_t placed = 0;
    std::string short_of;
    for (; placed < std::max<uint32_t>(max_total, 1); ++placed) {
      auto d = Place(model, PlacementRequest{f.name, need});
      if (!d.ok()) {
        short_of = d.status().message();
        break;
      }
      if (!model.Allocate(d->node, taken).ok()) {
        // Place found room for `need`; only the millionth of a core may not fit.
        if (Status st = model.Allocate(d->node, need); !st.ok()) {
          short_of = st.message();
          break;
        }
      }
      ++count[d->node];
    }
    if (placed == 0) {
      spdlog::warn("placement: {}: no node has room for an instance: {}", f.name, short_of);
      continue;
    }
    if (placed < max_total) {
      spdlog::info("placement: {}: {} of its {} instances fit ({})", f.name, placed, max_total,
                   short_of);
    }
    // Its warm instances (scale.min, or more where the cluster autoscaler wants them) go one
    // instance at a time to the node with the most of its share not yet
    // kept warm (ties: the node keeping fewer warm), so warm instances spread too.
    std::vector<uint32_t> mins(nodes.size(), 0);
    const uint32_t warm = std::max(spec.min_scale, Warm(f.name));
    for (uint32_t k = 0; k < std::min(warm, placed); ++k) {
      size_t best = 0;
      for (size_t i = 1; i < nodes.size(); ++i) {
        const uint32_t left = count[i] - mins[i], best_left = count[best] - mins[best];
        if (left > best_left || (left == best_left && mins[i] < mins[best])) best = i;
      }
      ++mins[best];
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (count[i] == 0) continue;
      cluster::Placement p;
      p.generation = f.generation;
      p.min_scale = mins[i];
      p.max_scale = count[i];
      want[keys_.Placements(f.name) + nodes[i].record.name] = p.ToJson();
    }
  }
  for (const auto& [key, value] : want) {
    auto it = have.find(key);
    if (it != have.end() && it->second == value) continue;
    auto put = etcd_->Put(key, value);
    if (!put.ok()) return put.status();
    spdlog::info("placement: {} = {}", key.substr(keys_.prefix().size() + 1), value);
  }
  for (const auto& [key, _] : have) {
    if (want.count(key)) continue;
    auto del = etcd_->Delete(key);
    if (!del.ok()) return del.status();
    spdlog::info("placement: {} removed", key.substr(keys_.prefix().size() + 1));
  }
  return Status::Ok();
}

}  // namespace shoal::controller
