#include "shoal/control/cluster/placed_functions.h"

#include <spdlog/spdlog.h>

namespace shoal::cluster {

PlacedFunctions::PlacedFunctions(EtcdClient* etcd, ClusterKeys keys, std::string node,
                                 std::function<void()> on_change, std::function<void()> on_any)
    : etcd_(etcd),
      keys_(std::move(keys)),
      node_(std::move(node)),
      on_change_(std::move(on_change)),
      on_any_(std::move(on_any)) {}

PlacedFunctions::~PlacedFunctions() {
  functions_watch_.reset();
  placements_watch_.reset();
}

bool PlacedFunctions::started() const {
  std::lock_guard lock(mu_);
  return functions_watch_ != nullptr;
}

Status PlacedFunctions::Start() {
  auto functions = etcd_->GetPrefix(keys_.Functions());
  if (!functions.ok()) return functions.status();
  auto placements = etcd_->GetPrefix(keys_.prefix() + "/placements/");
  if (!placements.ok()) return placements.status();
  Replace(*functions, *placements);
  auto fw = etcd_->WatchPrefix(
      keys_.Functions(), functions->revision + 1,
      [this](const std::vector<WatchEvent>& ev, int64_t) { OnFunctions(ev); },
      [this](int64_t) { Resync(); });
  auto pw = etcd_->WatchPrefix(
      keys_.prefix() + "/placements/", placements->revision + 1,
      [this](const std::vector<WatchEvent>& ev, int64_t) { OnPlacements(ev); },
      [this](int64_t) { Resync(); });
  {
    std::lock_guard lock(mu_);
    functions_watch_ = std::move(fw);
    placements_watch_ = std::move(pw);
  }
  if (on_change_) on_change_();
  return Status::Ok();
}

void PlacedFunctions::Resync() {
  auto functions = etcd_->GetPrefix(keys_.Functions());
  auto placements = etcd_->GetPrefix(keys_.prefix() + "/placements/");
  if (!functions.ok() || !placements.ok()) {
    spdlog::warn("cluster: re-reading functions and placements failed; the watches carry on");
    return;
  }
  Replace(*functions, *placements);
}

void PlacedFunctions::Replace(RangeResult& functions, RangeResult& placements) {
  {
    std::lock_guard lock(mu_);
    functions_.clear();
    placements_.clear();
    all_.clear();
  }
  std::vector<WatchEvent> f, p;
  for (auto& kv : functions.kvs) f.push_back({WatchEvent::Type::kPut, std::move(kv)});
  for (auto& kv : placements.kvs) p.push_back({WatchEvent::Type::kPut, std::move(kv)});
  OnFunctions(f);
  OnPlacements(p);
}

void PlacedFunctions::OnFunctions(const std::vector<WatchEvent>& events) {
  bool changed = false;
  for (const auto& e : events) {
    const std::string name = e.kv.key.substr(keys_.Functions().size());
    std::lock_guard lock(mu_);
    if (e.type == WatchEvent::Type::kDelete) {
      changed |= functions_.erase(name) > 0 && placements_.count(name) > 0;
      continue;
    }
    auto f = ClusterFunction::FromJson(e.kv.value);
    if (!f.ok()) {
      spdlog::warn("cluster: {}: {}", e.kv.key, f.status().message());
      continue;
    }
    changed |= placements_.count(name) > 0;
    functions_[name] = std::move(*f);
  }
  if (changed && on_change_) on_change_();
  if (!events.empty() && on_any_) on_any_();
}

void PlacedFunctions::OnPlacements(const std::vector<WatchEvent>& events) {
  const std::string root = keys_.prefix() + "/placements/";
  const std::string mine = "/" + node_;
  bool changed = false;
  for (const auto& e : events) {
    // <root><fn>/<node>
    const std::string rest = e.kv.key.substr(root.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) continue;
    const std::string fn = rest.substr(0, slash);
    const std::string node = rest.substr(slash + 1);
    const bool here = rest.substr(slash) == mine;
    std::lock_guard lock(mu_);
    if (e.type == WatchEvent::Type::kDelete) {
      if (auto it = all_.find(fn); it != all_.end()) {
        it->second.erase(node);
        if (it->second.empty()) all_.erase(it);
      }
      if (here) changed |= placements_.erase(fn) > 0;
      continue;
    }
    auto p = Placement::FromJson(e.kv.value);
    if (!p.ok()) {
      spdlog::warn("cluster: {}: {}", e.kv.key, p.status().message());
      continue;
    }
    all_[fn][node] = *p;
    if (!here) continue;
    placements_[fn] = *p;
    changed = true;
  }
  if (changed && on_change_) on_change_();
  if (!events.empty() && on_any_) on_any_();
}

std::vector<PlacedFunction> PlacedFunctions::List() const {
  std::lock_guard lock(mu_);
  std::vector<PlacedFunction> out;
  for (const auto& [name, placement] : placements_) {
    auto f = functions_.find(name);
    if (f == functions_.end()) continue;  // placed, but its record is not here (yet)
    out.push_back({f->second, placement});
  }
  return out;
}

std::vector<PlacedFunctions::Everywhere> PlacedFunctions::All() const {
  std::lock_guard lock(mu_);
  std::vector<Everywhere> out;
  for (const auto& [name, nodes] : all_) {
    auto f = functions_.find(name);
    if (f == functions_.end()) continue;
    Everywhere e{f->second, {}};
    for (int warm = 1; warm >= 0; --warm) {
      for (const auto& [node, p] : nodes) {
        if (p.max_scale > 0 && (p.min_scale > 0) == (warm == 1)) e.nodes.push_back(node);
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace shoal::cluster
