#include "shoal/control/controller/cluster_autoscaler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "shoal/common/clock.h"
#include "shoal/common/config.h"
#include "shoal/control/cluster/node_signals.h"
#include "shoal/control/node/manifest.h"

namespace shoal::controller {
namespace {

double NowMonotonicS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A node's signals older than this are its last words (it stopped deciding: gone, or the
// function left it): not summed.
constexpr int64_t kStaleMs = 10000;

}  // namespace

ClusterAutoscaler::ClusterAutoscaler(cluster::EtcdClient* etcd, cluster::ClusterKeys keys,
                                     ClusterFunctions* functions, double interval_s)
    : etcd_(etcd),
      keys_(std::move(keys)),
      functions_(functions),
      interval_s_(interval_s),
      loop_(
          "cluster autoscaler", std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)),
          [this] {
            Tick();
            return Status::Ok();
          },
          cluster::DirtyLoop::FirstPass::kAfterEvery) {}

ClusterAutoscaler::~ClusterAutoscaler() { Stop(); }

void ClusterAutoscaler::Start() {
  if (loop_.running()) return;
  loop_.Start();
  spdlog::info("cluster autoscaler: deciding every {:.1f} s from the nodes' signals", interval_s_);
}

void ClusterAutoscaler::Stop() {
  loop_.Stop();
  std::lock_guard lock(mu_);
  fns_.clear();  // a new leader starts its policies afresh
}

void ClusterAutoscaler::Tick() {
  auto functions = functions_->List();
  if (!functions.ok()) return;  // etcd away: the next tick tries again
  auto signals = etcd_->GetPrefix(keys_.AllSignals());
  if (!signals.ok()) return;
  // function -> its nodes' fresh signals
  std::map<std::string, std::vector<cluster::NodeSignals>> by_fn;
  const int64_t now_ms = UnixMs();
  for (const auto& kv : signals->kvs) {
    const std::string rest = kv.key.substr(keys_.AllSignals().size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) continue;
    auto s = cluster::NodeSignals::FromJson(kv.value);
    if (!s.ok() || now_ms - s->unix_ms > kStaleMs) continue;
    by_fn[rest.substr(0, slash)].push_back(*s);
  }
  std::map<std::string, Fn> next;
  {
    std::lock_guard lock(mu_);
    for (const auto& f : *functions) {
      auto specs = ParseFunctionManifests(f.manifest, NodeConfig{});
      if (!specs.ok() || specs->size() != 1) continue;
      const FunctionSpec& spec = (*specs)[0];
      if (spec.autoscaling.policy == "none") continue;
      Fn fn;
      if (auto it = fns_.find(f.name); it != fns_.end() && it->second.generation == f.generation) {
        fn = std::move(it->second);
      } else {
        auto made = FunctionAutoscaler::Make(AutoscalingConfigOf(spec));
        if (!made.ok()) {
          spdlog::warn("cluster autoscaler: {}: {}", f.name, made.status().message());
          continue;
        }
        fn.generation = f.generation;
        fn.autoscaler = std::move(made).value();
      }
      const auto& nodes = by_fn[f.name];
      // The nodes' intervals summed into one: counts add up, means are weighted by what they
      // average over, the p99 is the worst node's.
      FunctionSignals g;
      g.function = f.name;
      g.now_s = NowMonotonicS();
      g.interval_s = interval_s_;
      double wait_w = 0, service_w = 0, cold_w = 0;
      for (const auto& s : nodes) {
        g.interval_s = std::max(g.interval_s, s.interval_s);
        g.inflight += s.inflight;
        g.queued += s.queued;
        g.ready += s.ready;
        g.starting += s.starting;
        g.busy += s.busy;
        g.idle += s.idle;
        g.arrivals += s.arrivals;
        g.completions += s.completions;
        g.cold_starts += s.cold_starts;
        g.tokens_in_flight += s.tokens_in_flight;
        g.running_sequences += s.running_sequences;
        g.queued_sequences += s.queued_sequences;
        g.mean_queue_wait_s += s.mean_queue_wait_s * static_cast<double>(s.arrivals);
        wait_w += static_cast<double>(s.arrivals);
        g.mean_service_s += s.mean_service_s * static_cast<double>(s.completions);
        service_w += static_cast<double>(s.completions);
        g.cold_start_cost_s += s.cold_start_cost_s;
        cold_w += 1;
        g.p99_latency_s = std::max(g.p99_latency_s, s.p99_latency_s);
      }
      if (wait_w > 0) g.mean_queue_wait_s /= wait_w;
      if (service_w > 0) g.mean_service_s /= service_w;
      if (cold_w > 0) g.cold_start_cost_s /= cold_w;
      g.concurrency = std::max<uint32_t>(1, spec.concurrency);
      g.min_scale = spec.min_scale;
      g.max_scale = spec.max_scale == 0 ? NodeConfig{}.default_max_scale : spec.max_scale;
      const ScalingDecision d = fn.autoscaler->Observe(g);
      const uint32_t desired = std::min<uint32_t>(
          std::clamp(d.replicas, g.min_scale, g.max_scale) + d.prewarm, g.max_scale);
      if (desired != fn.desired) {
        spdlog::info(
            "cluster autoscaler: {} ({}): {} warm instance(s) (replicas {} + pre-warm "
            "{}); {} node(s) report {} in flight, {} queued, {} arrivals in {:.1f} s",
            f.name, spec.autoscaling.policy, desired, d.replicas, d.prewarm, nodes.size(),
            g.inflight, g.queued, g.arrivals, g.interval_s);
      }
      fn.desired = desired;
      fn.nodes = nodes.size();
      functions_->SetWarm(f.name, desired);
      next[f.name] = std::move(fn);
    }
    fns_ = std::move(next);
  }
}

std::string ClusterAutoscaler::MetricsText() {
  std::ostringstream o;
  o << "# HELP shoal_cluster_autoscaler_desired Warm instances the leader's cluster-wide "
       "autoscaler wants for a function, over all nodes.\n"
    << "# TYPE shoal_cluster_autoscaler_desired gauge\n";
  std::lock_guard lock(mu_);
  for (const auto& [name, fn] : fns_) {
    o << "shoal_cluster_autoscaler_desired{function=\"" << name << "\"} " << fn.desired << "\n";
  }
  o << "# HELP shoal_cluster_autoscaler_signal_nodes Nodes whose fresh signals the last decision "
       "summed.\n# TYPE shoal_cluster_autoscaler_signal_nodes gauge\n";
  for (const auto& [name, fn] : fns_) {
    o << "shoal_cluster_autoscaler_signal_nodes{function=\"" << name << "\"} " << fn.nodes << "\n";
  }
  return o.str();
}

}  // namespace shoal::controller
