#include "shoal/control/cluster/node_directory.h"

#include <spdlog/spdlog.h>

namespace shoal::cluster {

NodeDirectory::NodeDirectory(EtcdClient* etcd, ClusterKeys keys, ChangeFn on_change)
    : etcd_(etcd), keys_(std::move(keys)), on_change_(std::move(on_change)) {}

NodeDirectory::~NodeDirectory() { watch_.reset(); }

Status NodeDirectory::Start() {
  auto nodes = etcd_->GetPrefix(keys_.Nodes());
  if (!nodes.ok()) return nodes.status();
  std::vector<WatchEvent> as_events;
  for (auto& kv : nodes->kvs) {
    WatchEvent e;
    e.kv = std::move(kv);
    as_events.push_back(std::move(e));
  }
  Apply(as_events);
  watch_ = etcd_->WatchPrefix(
      keys_.Nodes(), nodes->revision + 1,
      [this](const std::vector<WatchEvent>& events, int64_t) { Apply(events); },
      [this](int64_t) { Reload(); });
  return Status::Ok();
}

void NodeDirectory::Reload() {
  auto nodes = etcd_->GetPrefix(keys_.Nodes());
  if (!nodes.ok()) {
    spdlog::warn("nodes: re-reading {}: {}", keys_.Nodes(), nodes.status().message());
    return;
  }
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, _] : nodes_) {
      bool still = false;
      for (const auto& kv : nodes->kvs) still |= kv.key == keys_.Node(name);
      if (!still) gone.push_back(name);
    }
  }
  std::vector<WatchEvent> events;
  for (const auto& name : gone) {
    WatchEvent e;
    e.type = WatchEvent::Type::kDelete;
    e.kv.key = keys_.Node(name);
    events.push_back(std::move(e));
  }
  for (auto& kv : nodes->kvs) {
    WatchEvent e;
    e.kv = std::move(kv);
    events.push_back(std::move(e));
  }
  Apply(events);
}

void NodeDirectory::Apply(const std::vector<WatchEvent>& events) {
  for (const auto& e : events) {
    const std::string name = e.kv.key.substr(keys_.Nodes().size());
    if (e.type == WatchEvent::Type::kDelete) {
      bool had;
      {
        std::lock_guard lock(mu_);
        had = nodes_.erase(name) > 0;
      }
      if (had) {
        spdlog::warn("nodes: {} left the cluster (its lease ended)", name);
        if (on_change_) on_change_(name, false);
      }
      continue;
    }
    auto record = NodeRecord::FromJson(e.kv.value);
    if (!record.ok()) {
      spdlog::warn("nodes: {}: {}", e.kv.key, record.status().message());
      continue;
    }
    bool is_new;
    {
      std::lock_guard lock(mu_);
      is_new = nodes_.find(name) == nodes_.end();
      nodes_[name] = NodeEntry{*record, e.kv.lease, e.kv.mod_revision};
    }
    if (is_new) {
      spdlog::info("nodes: {} joined at {} ({} cores, {} MiB, {} GPU(s))", name, record->address,
                   record->cores, record->memory_mib, record->gpus);
    }
    if (on_change_) on_change_(name, true);
  }
}

std::vector<NodeEntry> NodeDirectory::List() const {
  std::lock_guard lock(mu_);
  std::vector<NodeEntry> out;
  for (const auto& [_, n] : nodes_) out.push_back(n);
  return out;
}

size_t NodeDirectory::size() const {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

bool NodeDirectory::watching() const { return watch_ && watch_->connected(); }

}  // namespace shoal::cluster
