#include "shoal/control/kubernetes/operator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>

namespace shoal::kubernetes {

using json = nlohmann::json;

namespace {

std::string Name(const json& r) { return r.value("metadata", json::object()).value("name", ""); }

std::string ReasonFor(const Status& st) {
  return st.code() == StatusCode::kInvalidArgument ? "InvalidManifest"
         : st.code() == StatusCode::kUnavailable   ? "Unavailable"
                                                   : "DeployFailed";
}

// The reason of a status's Failed condition when it is True, else "".
std::string RefusedReason(const json& status) {
  if (!status.contains("conditions") || !status["conditions"].is_array()) return "";
  for (const auto& c : status["conditions"]) {
    if (c.value("type", "") == "Failed" && c.value("status", "") == "True") {
      return c.value("reason", "");
    }
  }
  return "";
}

}  // namespace

KubernetesOperator::KubernetesOperator(KubeClient client, OperatorBackend* backend,
                                       OperatorOptions options)
    : client_(std::move(client)), backend_(backend), options_(options) {
  kinds_.push_back(ResourceKind{.plural = "fljobs", .kind = "FLJob"});
  kinds_.push_back(ResourceKind{.plural = "functions", .kind = "Function"});
}

KubernetesOperator::~KubernetesOperator() { Stop(); }

void KubernetesOperator::Start() {
  if (!threads_.empty()) return;
  stop_ = false;
  spdlog::info("kubernetes: operator of fljobs and functions.shoal.dev starting ({})",
               client_.config().server);
  for (const auto& k : kinds_) threads_.emplace_back([this, k] { RunKind(k); });
  threads_.emplace_back([this] { RunStatus(); });
}

void KubernetesOperator::Stop() {
  if (threads_.empty()) return;
  {
    std::lock_guard l(sleep_mu_);
    stop_ = true;
  }
  sleep_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  spdlog::info("kubernetes: operator stopped");
}

bool KubernetesOperator::Sleep(int ms) {
  std::unique_lock l(sleep_mu_);
  sleep_cv_.wait_for(l, std::chrono::milliseconds(ms), [&] { return stop_.load(); });
  return !stop_;
}

void KubernetesOperator::RunKind(const ResourceKind& kind) {
  int failures = 0;
  while (!stop_) {
    auto list = client_.List(kind);
    if (!list.ok()) {
      if (failures++ == 0)
        spdlog::warn("kubernetes: list {}: {}", kind.plural, list.status().message());
      Sleep(std::min(5000, 250 << std::min(failures, 5)));
      continue;
    }
    if (failures > 0)
      spdlog::info("kubernetes: {} listed again after {} failure(s)", kind.plural, failures);
    failures = 0;
    std::set<std::string> present;
    for (const auto& item : list->items) {
      present.insert(Name(item));
      Reconcile(kind, item);
    }
    std::set<std::string> gone;
    {
      std::lock_guard l(mu_);
      for (const auto& [key, t] : tracked_) {
        if (t.kind == kind.kind && !present.count(t.name)) gone.insert(t.name);
      }
    }
    for (const auto& name : backend_->Managed(kind.kind)) {
      if (!present.count(name)) gone.insert(name);
    }
    for (const auto& name : gone) Deleted(kind, name);
    spdlog::info("kubernetes: listed {} {} at resourceVersion {}", list->items.size(), kind.plural,
                 list->resource_version);
    std::string rv = list->resource_version;
    const auto resync_at =
        std::chrono::steady_clock::now() + std::chrono::seconds(options_.resync_s);
    while (!stop_) {
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(
                            resync_at - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      const int timeout = static_cast<int>(std::clamp<int64_t>(left, 1, options_.watch_timeout_s));
      auto w = client_.Watch(
          kind, rv, timeout,
          [&](const std::string& type, const json& obj) {
            if (type == "DELETED") {
              Deleted(kind, Name(obj));
            } else {
              Reconcile(kind, obj);
            }
          },
          &stop_);
      if (!w.ok()) {
        spdlog::warn("kubernetes: {}; re-listing", w.status().message());
        Sleep(1000);
        break;
      }
      if (w->gone) {
        spdlog::info("kubernetes: watch of {} from {}: 410 Gone; re-listing", kind.plural, rv);
        break;
      }
      rv = w->resource_version;
    }
  }
}

void KubernetesOperator::Reconcile(const ResourceKind& kind, const json& resource) {
  const std::string name = Name(resource);
  if (name.empty()) return;
  const json& meta = resource["metadata"];
  std::lock_guard l(mu_);
  Tracked& t = tracked_[kind.kind + "/" + name];
  t.kind = kind.kind;
  t.name = name;
  t.ns = meta.value("namespace", "default");
  t.generation = meta.value("generation", int64_t{0});
  t.resource = resource;
  t.status = resource.value("status", json::object());
  const int64_t observed = t.status.value("observedGeneration", int64_t{0});
  if (observed == t.generation && RefusedReason(t.status) == "InvalidManifest") {
    // This generation was refused before (this controller or the one before it): not again.
    t.observed.generation = t.generation;
    t.observed.deploy_error = t.status.value("message", "");
    t.observed.deploy_reason = "InvalidManifest";
  } else if (observed != t.generation || t.retry || !backend_->Exists(kind.kind, name)) {
    Deploy(kind, resource, &t);
  } else {
    t.observed.generation = t.generation;
  }
  WriteStatus(kind, &t);
}

void KubernetesOperator::Deploy(const ResourceKind& kind, const json& resource, Tracked* t) {
  Status st = backend_->Apply(kind.kind, ManifestOf(resource));
  t->observed.generation = t->generation;
  t->observed.deploy_error = st.ok() ? "" : st.message();
  t->observed.deploy_reason = st.ok() ? "" : ReasonFor(st);
  t->retry = !st.ok() && st.code() != StatusCode::kInvalidArgument;
  if (st.ok()) {
    spdlog::info("kubernetes: {} {}/{} generation {} deployed", kind.kind, t->ns, t->name,
                 t->generation);
  } else {
    spdlog::warn("kubernetes: {} {}/{} generation {} not deployed: {}", kind.kind, t->ns, t->name,
                 t->generation, st.message());
  }
}

void KubernetesOperator::Deleted(const ResourceKind& kind, const std::string& name) {
  std::lock_guard l(mu_);
  tracked_.erase(kind.kind + "/" + name);
  Status st = backend_->Delete(kind.kind, name);
  if (st.ok() || st.code() == StatusCode::kNotFound) {
    spdlog::info("kubernetes: {} {} deleted: deleted from the Shoal cluster", kind.kind, name);
  } else {
    spdlog::warn("kubernetes: {} {} deleted, but not from Shoal: {}", kind.kind, name,
                 st.message());
  }
}

void KubernetesOperator::WriteStatus(const ResourceKind& kind, Tracked* t) {
  if (t->observed.deploy_error.empty()) backend_->Observe(kind.kind, t->name, &t->observed);
  json next = StatusFor(kind.kind, t->observed, t->status, Rfc3339Now());
  if (next == t->status) return;
  Status st = client_.PatchStatus(kind, t->ns, t->name, next);
  if (st.ok()) {
    t->status = std::move(next);
  } else if (st.code() != StatusCode::kNotFound) {
    spdlog::warn("kubernetes: status of {} {}/{}: {}", kind.kind, t->ns, t->name, st.message());
  }
}

void KubernetesOperator::RunStatus() {
  while (Sleep(options_.status_interval_ms)) {
    std::lock_guard l(mu_);
    for (auto& [key, t] : tracked_) {
      const ResourceKind& kind = t.kind == "FLJob" ? kinds_[0] : kinds_[1];
      if (t.retry) Deploy(kind, t.resource, &t);  // e.g. no Shoal node was registered yet
      WriteStatus(kind, &t);
    }
  }
}

}  // namespace shoal::kubernetes
