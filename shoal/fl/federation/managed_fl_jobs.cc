#include "shoal/fl/federation/managed_fl_jobs.h"

#include <spdlog/spdlog.h>

#include "shoal/common/clock.h"
#include "shoal/common/stop_signal.h"

namespace shoal::cluster {

namespace {
constexpr auto kTick = std::chrono::milliseconds(250);
constexpr int kRepublishTicks = 8;  // clients joining and evaluations show within ~2 s
}  // namespace

ManagedFlJobs::ManagedFlJobs(std::string node, FlCoordinator& fl, EtcdClient* etcd,
                             ClusterKeys keys, ParseFn parse)
    : node_(std::move(node)),
      fl_(fl),
      etcd_(etcd),
      keys_(std::move(keys)),
      parse_(std::move(parse)),
      mirror_(etcd, keys_.Jobs(), [this](const PrefixMirror::Snapshot& now) {
        {
          std::lock_guard lock(mu_);
          managed_.clear();
          for (const auto& [name, _] : now) managed_.insert(name);
          changed_ = true;
        }
        cv_.notify_all();
      }) {}

ManagedFlJobs::~ManagedFlJobs() { Stop(); }

Status ManagedFlJobs::Start() {
  SHOAL_RETURN_IF_ERROR(mirror_.Start());
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void ManagedFlJobs::Stop() {
  if (!SignalStop(mu_, stopping_, cv_)) return;
  if (thread_.joinable()) thread_.join();
}

bool ManagedFlJobs::Manages(const std::string& job) const {
  std::lock_guard lock(mu_);
  return managed_.count(job) != 0;
}

void ManagedFlJobs::Committed(const std::string& job) {
  {
    std::lock_guard lock(mu_);
    dirty_.insert(job);
    changed_ = true;  // published now, not at the next tick
  }
  cv_.notify_one();
}

void ManagedFlJobs::Loop() {
  for (int tick = 0;; ++tick) {
    bool changed;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, kTick, [this] { return stopping_ || changed_; });
      if (stopping_) return;
      changed = changed_;
      changed_ = false;
      if (tick % kRepublishTicks == 0) {
        for (const auto& [name, _] : running_) dirty_.insert(name);
      }
    }
    // Every tick, not only on a change: a job refused once (its pool full) is tried again.
    (void)changed;
    Reconcile(mirror_.Get());
    Publish();
  }
}

void ManagedFlJobs::Reconcile(const PrefixMirror::Snapshot& records) {
  const auto here = fl_.ListJobs();
  auto runs = [&](const std::string& name) {
    return std::find(here.begin(), here.end(), name) != here.end();
  };
  for (const auto& [name, text] : records) {
    auto r = FlJobRecord::FromJson(text);
    if (!r.ok()) continue;
    auto it = running_.find(name);
    if (r->top != node_) {
      if (it != running_.end()) {
        // Moved away (this node's lease ran out while it lived): the new top resumes it.
        if (runs(name)) {
          if (Status st = fl_.DropJob(name); !st.ok()) {
            spdlog::error("fl job {}: stopping it here: {}", name, st.ToString());
          }
        }
        spdlog::warn("fl job {}: the controller moved it to node {}; this node stopped it", name,
                     r->top);
        running_.erase(it);
        published_.erase(name);
      }
      continue;
    }
    if (it != running_.end() && it->second == r->generation && runs(name)) continue;
    if (it == running_.end() && runs(name)) {
      // Restored from this node's state at start-up: running as deployed, unless re-deployed
      // while this node was down.
      auto have = fl_.Spec(name);
      if (have.ok() && have->manifest == r->manifest) {
        running_[name] = r->generation;
        continue;
      }
    }
    auto spec = parse_(r->manifest);
    if (!spec.ok()) {
      spdlog::error("fl job {}: its manifest (generation {}): {}", name, r->generation,
                    spec.status().ToString());
      running_[name] = r->generation;  // not tried again until a new generation
      continue;
    }
    if (!runs(name) && !r->moved_from.empty()) {
      // Its top before was another node, lost: resume from the shared checkpoint store.
      Status st = fl_.TakeOver(name);
      if (st.ok()) {
        spdlog::info(
            "fl job {}: this node is its top now (moved here from node {} by the controller), "
            "resumed from its checkpoint",
            name, r->moved_from);
        running_[name] = r->generation;
        std::lock_guard lock(mu_);
        dirty_.insert(name);
        continue;
      }
      spdlog::warn(
          "fl job {}: moved here from node {}, but it cannot resume ({}): it starts again at "
          "version 0",
          name, r->moved_from, st.message());
    }
    if (Status st = fl_.DeployJob(*spec); !st.ok()) {
      spdlog::error("fl job {}: running it here: {}", name, st.ToString());
      continue;
    }
    spdlog::info("fl job {}: generation {} runs on this node, its top (the controller's choice)",
                 name, r->generation);
    running_[name] = r->generation;
    std::lock_guard lock(mu_);
    dirty_.insert(name);
  }
  // Deleted through the controller.
  for (auto it = running_.begin(); it != running_.end();) {
    if (records.count(it->first) != 0) {
      ++it;
      continue;
    }
    if (runs(it->first)) {
      if (Status st = fl_.DeleteJob(it->first); !st.ok()) {
        spdlog::error("fl job {}: deleting it: {}", it->first, st.ToString());
      }
    }
    (void)etcd_->Delete(keys_.JobState(it->first));
    published_.erase(it->first);
    it = running_.erase(it);
  }
}

void ManagedFlJobs::Publish() {
  std::set<std::string> dirty;
  {
    std::lock_guard lock(mu_);
    dirty.swap(dirty_);
  }
  for (const auto& name : dirty) {
    if (running_.count(name) == 0) continue;
    auto text = fl_.JobStatusJson(name);
    if (!text.ok()) continue;
    auto cut = FlJobState::CutStatus(*text);
    if (!cut.ok()) continue;
    FlJobState s;
    s.top = node_;
    s.status = std::move(*cut);
    // Unchanged but for the time: not written again.
    const std::string key_part = s.ToJson();  // updated_unix_ms 0
    auto it = published_.find(name);
    if (it != published_.end() && it->second == key_part) continue;
    s.updated_unix_ms = UnixMs();
    auto put = etcd_->Put(keys_.JobState(name), s.ToJson());
    if (!put.ok()) {
      std::lock_guard lock(mu_);
      dirty_.insert(name);  // tried again next tick
      continue;
    }
    published_[name] = key_part;
  }
}

}  // namespace shoal::cluster
