#include "shoal/control/cluster/prefix_mirror.h"

#include <spdlog/spdlog.h>

namespace shoal::cluster {

PrefixMirror::PrefixMirror(EtcdClient* etcd, std::string prefix, ChangeFn on_change)
    : etcd_(etcd), prefix_(std::move(prefix)), on_change_(std::move(on_change)) {}

PrefixMirror::~PrefixMirror() {
  std::unique_ptr<EtcdWatch> w;
  {
    std::lock_guard lock(mu_);
    w = std::move(watch_);
  }
  w.reset();  // joins the watch thread (outside mu_: its callback takes it)
}

bool PrefixMirror::started() const {
  std::lock_guard lock(mu_);
  return watch_ != nullptr;
}

PrefixMirror::Snapshot PrefixMirror::Get() const {
  std::lock_guard lock(mu_);
  return keys_;
}

Status PrefixMirror::Start() {
  auto all = etcd_->GetPrefix(prefix_);
  if (!all.ok()) return all.status();
  std::vector<WatchEvent> ev;
  for (auto& kv : all->kvs) ev.push_back({WatchEvent::Type::kPut, std::move(kv)});
  Apply(ev, /*whole=*/true);
  auto w = etcd_->WatchPrefix(
      prefix_, all->revision + 1,
      [this](const std::vector<WatchEvent>& events, int64_t) { Apply(events, false); },
      [this](int64_t) { Resync(); });
  std::lock_guard lock(mu_);
  watch_ = std::move(w);
  return Status::Ok();
}

void PrefixMirror::Resync() {
  auto all = etcd_->GetPrefix(prefix_);
  if (!all.ok()) {
    spdlog::warn("cluster: re-reading {} failed ({}); the watch carries on", prefix_,
                 all.status().message());
    return;
  }
  std::vector<WatchEvent> ev;
  for (auto& kv : all->kvs) ev.push_back({WatchEvent::Type::kPut, std::move(kv)});
  Apply(ev, /*whole=*/true);
}

void PrefixMirror::Apply(const std::vector<WatchEvent>& events, bool whole) {
  Snapshot now;
  {
    std::lock_guard lock(mu_);
    if (whole) keys_.clear();
    for (const auto& e : events) {
      if (e.kv.key.size() <= prefix_.size()) continue;
      std::string k = e.kv.key.substr(prefix_.size());
      if (e.type == WatchEvent::Type::kPut) {
        keys_[std::move(k)] = e.kv.value;
      } else {
        keys_.erase(k);
      }
    }
    now = keys_;
  }
  if (on_change_) on_change_(now);
}

}  // namespace shoal::cluster
