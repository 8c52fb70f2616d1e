#include "shoal/tools/simulator/simulator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <limits>
#include <random>
#include <utility>

namespace shoal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Log-bucketed latency histogram: 64 buckets per power of two from 2^-20 s (~1 us) to 2^17 s,
// so quantiles are within ~1% without keeping every sample.
class LatencyHistogram {
 public:
  static constexpr int kSub = 64, kMinExp = -20, kMaxExp = 17;
  LatencyHistogram() : counts_((kMaxExp - kMinExp) * kSub, 0) {}
  void Add(double v) {
    ++counts_[Index(v)];
    ++n_;
  }
  void Merge(const LatencyHistogram& o) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
    n_ += o.n_;
  }
  double Quantile(double q) const {
    if (n_ == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * n_));
    uint64_t acc = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      acc += counts_[i];
      if (acc >= std::max<uint64_t>(rank, 1)) {
        const int e = static_cast<int>(i / kSub) + kMinExp;
        const double sub = static_cast<double>(i % kSub);
        return std::ldexp(1.0 + (sub + 0.5) / kSub, e);
      }
    }
    return std::ldexp(1.0, kMaxExp);
  }

 private:
  static size_t Index(double v) {
    if (!(v >= std::ldexp(1.0, kMinExp))) return 0;
    if (v >= std::ldexp(1.0, kMaxExp)) return (kMaxExp - kMinExp) * kSub - 1;
    const uint64_t bits = std::bit_cast<uint64_t>(v);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    const uint64_t sub = (bits >> (52 - 6)) & (kSub - 1);
    return static_cast<size_t>(e - kMinExp) * kSub + sub;
  }
  std::vector<uint64_t> counts_;
  uint64_t n_ = 0;
};

enum EventType : uint32_t { kCompletion, kReady, kTick, kKeepAlive };

struct Event {
  double t;
  uint64_t seq;
  uint32_t type;
  uint32_t id;  // instance (completion, ready, keep-alive)
  double a;     // completion: arrival time; keep-alive: idle generation
  double b;     // completion: service start time
};

struct EventLater {
  bool operator()(const Event& x, const Event& y) const {
    return x.t != y.t ? x.t > y.t : x.seq > y.seq;
  }
};

enum class InstanceState : uint8_t { kStarting, kReady, kStopped };

struct Instance {
  uint32_t fn;
  uint32_t node;
  InstanceState state;
  bool in_avail = false;
  uint32_t inflight = 0;
  uint32_t pos = 0;  // index in its function's `alive`
  double spawn_t = 0;
  double idle_since = 0;
  uint64_t idle_gen = 0;
};

struct Pending {
  double arrival;
  double service;
};

struct FnState {
  const FunctionConfig* cfg;
  std::deque<Pending> queue;
  std::vector<uint32_t> avail;  // ready instances that may have a free slot (checked on use)
  std::vector<uint32_t> alive;  // starting and ready instances
  uint32_t ready = 0, starting = 0, busy = 0, inflight = 0;
  uint32_t target = 0;
  double keep_alive = 60;
  // This control interval.
  uint64_t iv_arrivals = 0, iv_completions = 0, iv_dispatched = 0;
  double iv_wait = 0, iv_service = 0, iv_cold_cost = 0;
  uint32_t iv_cold = 0, iv_cold_requests = 0, iv_slo_misses = 0;
  std::vector<double> iv_latency;
  // The whole run.
  FunctionReport report;
  double sum_latency = 0, sum_wait = 0, sum_service = 0;
  uint64_t waited = 0;
  bool ever_ready = false;
  LatencyHistogram hist;
};

class Engine {
 public:
  explicit Engine(const SimulatorConfig& c) : c_(c), rng_(c.seed) {}

  Result<SimulationReport> Run(ArrivalSource& src) {
    SHOAL_RETURN_IF_ERROR(Setup());
    Arrival next;
    bool have = src.Next(next);
    Push(c_.control_interval_s, kTick, 0, 0, 0);
    double now = 0;
    for (;;) {
      const double th = heap_.empty() ? kInf : heap_.front().t;
      if (!have && in_system_ == 0 && (th == kInf || th > c_.duration_s)) break;
      ++events_;
      if (have && next.t < th) {
        now = next.t;
        if (next.function >= fns_.size()) {
          return InvalidArgument("arrival at t=" + std::to_string(next.t) + " names function " +
                                 std::to_string(next.function) + " but only " +
                                 std::to_string(fns_.size()) + " are configured");
        }
        OnArrival(now, next);
        have = src.Next(next);
        if (have && next.t < now) {
          return InvalidArgument("arrivals out of order at t=" + std::to_string(next.t));
        }
        continue;
      }
      std::pop_heap(heap_.begin(), heap_.end(), EventLater{});
      const Event e = heap_.back();
      heap_.pop_back();
      now = e.t;
      switch (e.type) {
        case kCompletion:
          OnCompletion(now, e);
          break;
        case kReady:
          OnReady(now, e.id);
          break;
        case kTick:
          OnTick(now);
          Push(now + c_.control_interval_s, kTick, 0, 0, 0);
          break;
        case kKeepAlive:
          OnKeepAlive(now, e);
          break;
      }
    }
    return Finish(std::max(now, c_.duration_s));
  }

 private:
  Status Setup() {
    if (!(c_.control_interval_s > 0)) return InvalidArgument("control_interval_s must be > 0");
    if (c_.nodes.empty()) {
      cluster_.AddNode("node-0", {1e18, 1e18, 1u << 30}, c_.cold_start.Mean(false));
      factor_.push_back(1.0);
    }
    for (const auto& n : c_.nodes) {
      const size_t i =
          cluster_.AddNode(n.name, n.capacity, c_.cold_start.Mean(false) * n.cold_start_factor);
      for (const auto& f : n.cached) cluster_.node(i).cached.insert(f);
      factor_.push_back(n.cold_start_factor);
    }
    fns_.resize(c_.functions.size());
    for (size_t f = 0; f < fns_.size(); ++f) {
      const FunctionConfig& cfg = c_.functions[f];
      if (cfg.concurrency == 0) return InvalidArgument(cfg.name + ": concurrency must be >= 1");
      if (cfg.min_scale > cfg.max_scale) {
        return InvalidArgument(cfg.name + ": min_scale above max_scale");
      }
      FnState& s = fns_[f];
      s.cfg = &cfg;
      s.report.name = cfg.name;
      s.keep_alive = cfg.keep_alive_s;
      s.target = std::clamp(cfg.initial_replicas, cfg.min_scale, cfg.max_scale);
      for (uint32_t k = 0; k < s.target; ++k) {
        auto placed = Place(cluster_, {cfg.name, cfg.resources});
        if (!placed.ok()) {
          return Status(placed.status().code(),
                        cfg.name + ": initial replicas: " + placed.status().message());
        }
        SHOAL_RETURN_IF_ERROR(cluster_.Allocate(placed->node, cfg.resources));
        cluster_.node(placed->node).cached.insert(cfg.name);
        const uint32_t id = NewInstance(static_cast<uint32_t>(f), placed->node, 0);
        inst_[id].state = InstanceState::kReady;
        ++s.ready;
        s.avail.push_back(id);
        inst_[id].in_avail = true;
      }
    }
    return Status::Ok();
  }

  void Push(double t, uint32_t type, uint32_t id, double a, double b) {
    heap_.push_back({t, seq_++, type, id, a, b});
    std::push_heap(heap_.begin(), heap_.end(), EventLater{});
  }

  uint32_t NewInstance(uint32_t fn, size_t node, double now) {
    Instance in{};
    in.fn = fn;
    in.node = static_cast<uint32_t>(node);
    in.state = InstanceState::kStarting;
    in.spawn_t = now;
    in.idle_since = now;
    FnState& s = fns_[fn];
    in.pos = static_cast<uint32_t>(s.alive.size());
    inst_.push_back(in);
    const uint32_t id = static_cast<uint32_t>(inst_.size() - 1);
    s.alive.push_back(id);
    return id;
  }

  // Starts one instance through placement and a cold start; false when nothing fits.
  bool Spawn(uint32_t fn, double now) {
    FnState& s = fns_[fn];
    const FunctionConfig& cfg = *s.cfg;
    auto placed = Place(cluster_, {cfg.name, cfg.resources});
    if (!placed.ok() || !cluster_.Allocate(placed->node, cfg.resources).ok()) {
      ++s.report.placement_failures;
      return false;
    }
    const bool cached = cluster_.node(placed->node).cached.count(cfg.name) > 0;
    const double cost = c_.cold_start.Sample(rng_, cached).total_s() * factor_[placed->node];
    const uint32_t id = NewInstance(fn, placed->node, now);
    ++s.starting;
    Push(now + cost, kReady, id, 0, 0);
    return true;
  }

  uint32_t FindSlot(FnState& s) {
    while (!s.avail.empty()) {
      const uint32_t id = s.avail.back();
      Instance& in = inst_[id];
      if (in.state == InstanceState::kReady && in.inflight < s.cfg->concurrency) return id;
      in.in_avail = false;
      s.avail.pop_back();
    }
    return UINT32_MAX;
  }

  void Dispatch(FnState& s, uint32_t id, double now, double arrival, double service) {
    Instance& in = inst_[id];
    if (in.inflight++ == 0) {
      ++s.busy;
      s.report.idle_instance_s += now - in.idle_since;
      ++in.idle_gen;
    }
    ++s.inflight;
    const double wait = now - arrival;
    ++s.iv_dispatched;
    s.iv_wait += wait;
    if (arrival >= c_.warmup_s) {
      s.sum_wait += wait;
      ++s.waited;
    }
    if (service < 0) service = s.cfg->service.Sample(rng_);
    Push(now + service, kCompletion, id, arrival, now);
  }

  void OnArrival(double now, const Arrival& a) {
    FnState& s = fns_[a.function];
    ++s.iv_arrivals;
    ++in_system_;
    const uint32_t id = s.queue.empty() ? FindSlot(s) : UINT32_MAX;
    if (id != UINT32_MAX) {
      Dispatch(s, id, now, a.t, a.service_s);
      return;
    }
    s.queue.push_back({a.t, a.service_s});
    if (s.ready + s.starting == 0 && s.cfg->max_scale > 0) Spawn(a.function, now);
  }

  // Starts the keep-alive clock of an instance that has just run out of work.
  void BecameIdle(uint32_t id, double now) {
    Instance& in = inst_[id];
    const FnState& s = fns_[in.fn];
    in.idle_since = now;
    Push(now + s.keep_alive, kKeepAlive, id, static_cast<double>(in.idle_gen), 0);
  }

  void OnCompletion(double now, const Event& e) {
    Instance& in = inst_[e.id];
    FnState& s = fns_[in.fn];
    --in_system_;
    --s.inflight;
    const double latency = now - e.a;
    const double service = now - e.b;
    ++s.iv_completions;
    s.iv_service += service;
    s.iv_latency.push_back(latency);
    if (s.cfg->slo_s > 0 && latency > s.cfg->slo_s) ++s.iv_slo_misses;
    if (e.a >= c_.warmup_s) {
      FunctionReport& r = s.report;
      ++r.requests;
      s.sum_latency += latency;
      s.sum_service += service;
      s.hist.Add(latency);
      if (s.cfg->slo_s > 0 && latency > s.cfg->slo_s) ++r.slo_violations;
    }
    if (!s.queue.empty()) {  // the freed slot takes the head of the FIFO; stays busy
      const Pending p = s.queue.front();
      s.queue.pop_front();
      ++s.inflight;
      const double wait = now - p.arrival;
      ++s.iv_dispatched;
      s.iv_wait += wait;
      if (p.arrival >= c_.warmup_s) {
        s.sum_wait += wait;
        ++s.waited;
      }
      const double svc = p.service < 0 ? s.cfg->service.Sample(rng_) : p.service;
      Push(now + svc, kCompletion, e.id, p.arrival, now);
      return;
    }
    --in.inflight;
    if (!in.in_avail) {
      in.in_avail = true;
      s.avail.push_back(e.id);
    }
    if (in.inflight == 0) {
      --s.busy;
      BecameIdle(e.id, now);
    }
  }

  void OnReady(double now, uint32_t id) {
    Instance& in = inst_[id];
    FnState& s = fns_[in.fn];
    in.state = InstanceState::kReady;
    --s.starting;
    ++s.ready;
    const double cost = now - in.spawn_t;
    ++s.report.cold_starts;
    s.report.cold_start_s += cost;
    ++s.iv_cold;
    s.iv_cold_cost += cost;
    NodeState& node = cluster_.node(in.node);
    if (!node.cached.count(s.cfg->name)) {
      // The node's measured cost of an uncached start, an EWMA so placement sees drift.
      node.cold_start_cost_s = 0.8 * node.cold_start_cost_s + 0.2 * cost;
      node.cached.insert(s.cfg->name);
    }
    in.idle_since = now;
    const bool first = !s.ever_ready;
    s.ever_ready = true;
    while (!s.queue.empty() && in.inflight < s.cfg->concurrency) {
      const Pending p = s.queue.front();
      s.queue.pop_front();
      ++s.iv_cold_requests;
      if (p.arrival >= c_.warmup_s) {
        ++s.report.cold_requests;
        if (first) ++s.report.first_cold_requests;
      }
      Dispatch(s, id, now, p.arrival, p.service);
    }
    if (in.inflight < s.cfg->concurrency) {
      in.in_avail = true;
      s.avail.push_back(id);
    }
    if (in.inflight == 0) BecameIdle(id, now);
  }

  void Stop(FnState& s, uint32_t id, double now) {
    Instance& in = inst_[id];
    if (in.state == InstanceState::kReady) {
      --s.ready;
      if (in.inflight == 0) s.report.idle_instance_s += now - in.idle_since;
    }
    in.state = InstanceState::kStopped;
    s.report.instance_s += now - in.spawn_t;
    cluster_.Release(in.node, s.cfg->resources);
    // Swap-remove from the function's alive list.
    const uint32_t last = s.alive.back();
    s.alive[in.pos] = last;
    inst_[last].pos = in.pos;
    s.alive.pop_back();
  }

  uint32_t Excess(const FnState& s) const {
    const uint32_t alive = s.ready + s.starting;
    return alive > s.target ? alive - s.target : 0;
  }

  void OnKeepAlive(double now, const Event& e) {
    Instance& in = inst_[e.id];
    if (in.state != InstanceState::kReady || in.inflight != 0 ||
        static_cast<double>(in.idle_gen) != e.a) {
      return;
    }
    FnState& s = fns_[in.fn];
    const double due = in.idle_since + s.keep_alive;
    if (now + 1e-12 < due) {  // the keep-alive grew since this was scheduled
      Push(due, kKeepAlive, e.id, e.a, 0);
      return;
    }
    if (Excess(s) > 0) Stop(s, e.id, now);
  }

  FunctionSignals Signals(FnState& s, double now) {
    const FunctionConfig& cfg = *s.cfg;
    FunctionSignals g;
    g.function = cfg.name;
    g.now_s = now;
    g.interval_s = c_.control_interval_s;
    g.inflight = s.inflight;
    g.queued = static_cast<uint32_t>(s.queue.size());
    g.arrivals = s.iv_arrivals;
    g.completions = s.iv_completions;
    g.mean_queue_wait_s = s.iv_dispatched ? s.iv_wait / s.iv_dispatched : 0;
    g.mean_service_s = s.iv_completions ? s.iv_service / s.iv_completions : 0;
    if (!s.iv_latency.empty()) {
      auto& v = s.iv_latency;  // reordered in place; cleared after the tick anyway
      const size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.99 * v.size())) - 1);
      std::nth_element(v.begin(), v.begin() + k, v.end());
      g.p99_latency_s = v[k];
    }
    g.cold_starts = s.iv_cold;
    if (s.iv_cold > 0) {
      g.cold_start_cost_s = s.iv_cold_cost / s.iv_cold;
    } else {
      auto p = Place(cluster_, {cfg.name, cfg.resources});
      if (p.ok()) {
        g.cold_start_cost_s = p->kind == PlacementKind::kCached
                                  ? c_.cold_start.Mean(true) * factor_[p->node]
                                  : p->expected_cold_start_s;
      } else {
        g.cold_start_cost_s = c_.cold_start.Mean(false);
      }
    }
    g.ready = s.ready;
    g.starting = s.starting;
    g.busy = s.busy;
    g.idle = s.ready - s.busy;
    g.concurrency = cfg.concurrency;
    g.min_scale = cfg.min_scale;
    g.max_scale = cfg.max_scale;
    g.slo_s = cfg.slo_s;
    g.cold_requests = s.iv_cold_requests;
    g.slo_misses = s.iv_slo_misses;
    return g;
  }

  void OnTick(double now) {
    for (uint32_t f = 0; f < fns_.size(); ++f) {
      FnState& s = fns_[f];
      const FunctionConfig& cfg = *s.cfg;
      if (cfg.policy || cfg.keep_alive) {
        const FunctionSignals g = Signals(s, now);
        double ka = 0;
        if (cfg.policy) {
          const ScalingDecision d = cfg.policy(g);
          const uint64_t want =
              static_cast<uint64_t>(std::clamp(d.replicas, cfg.min_scale, cfg.max_scale)) +
              d.prewarm;
          s.target = static_cast<uint32_t>(std::min<uint64_t>(want, cfg.max_scale));
          ka = d.keep_alive_s;
        }
        if (!(ka > 0)) ka = cfg.keep_alive ? cfg.keep_alive(g) : cfg.keep_alive_s;
        s.keep_alive = std::max(0.0, ka);
      }
      while (s.ready + s.starting < s.target) {
        if (!Spawn(f, now)) break;
      }
      if (Excess(s) > 0) {  // idle past the keep-alive, longest idle first
        std::vector<std::pair<double, uint32_t>> idle;
        for (uint32_t id : s.alive) {
          const Instance& in = inst_[id];
          if (in.state == InstanceState::kReady && in.inflight == 0 &&
              now - in.idle_since >= s.keep_alive) {
            idle.push_back({in.idle_since, id});
          }
        }
        std::sort(idle.begin(), idle.end());
        for (size_t k = 0; k < idle.size() && Excess(s) > 0; ++k) Stop(s, idle[k].second, now);
      }
      if (c_.record_series) {
        s.report.series.push_back({now, s.target, s.ready, s.starting, s.iv_arrivals, s.inflight,
                                   static_cast<uint32_t>(s.queue.size())});
      }
      s.iv_arrivals = s.iv_completions = s.iv_dispatched = 0;
      s.iv_wait = s.iv_service = s.iv_cold_cost = 0;
      s.iv_cold = s.iv_cold_requests = s.iv_slo_misses = 0;
      s.iv_latency.clear();
    }
  }

  Result<SimulationReport> Finish(double end) {
    SimulationReport out;
    out.end_s = end;
    out.events = events_;
    LatencyHistogram all;
    double sum_lat = 0, sum_wait = 0, sum_svc = 0;
    uint64_t waited = 0;
    FunctionReport& t = out.total;
    t.name = "total";
    for (auto& s : fns_) {
      FunctionReport& r = s.report;
      for (uint32_t id : s.alive) {
        const Instance& in = inst_[id];
        r.instance_s += end - in.spawn_t;
        if (in.state == InstanceState::kReady && in.inflight == 0) {
          r.idle_instance_s += end - in.idle_since;
        }
      }
      r.mean_latency_s = r.requests ? s.sum_latency / r.requests : 0;
      r.mean_service_s = r.requests ? s.sum_service / r.requests : 0;
      r.mean_queue_wait_s = s.waited ? s.sum_wait / s.waited : 0;
      r.p50_latency_s = s.hist.Quantile(0.5);
      r.p99_latency_s = s.hist.Quantile(0.99);
      all.Merge(s.hist);
      sum_lat += s.sum_latency;
      sum_wait += s.sum_wait;
      sum_svc += s.sum_service;
      waited += s.waited;
      t.requests += r.requests;
      t.slo_violations += r.slo_violations;
      t.cold_requests += r.cold_requests;
      t.first_cold_requests += r.first_cold_requests;
      t.cold_starts += r.cold_starts;
      t.cold_start_s += r.cold_start_s;
      t.instance_s += r.instance_s;
      t.idle_instance_s += r.idle_instance_s;
      t.placement_failures += r.placement_failures;
      out.functions.push_back(std::move(r));
    }
    t.mean_latency_s = t.requests ? sum_lat / t.requests : 0;
    t.mean_service_s = t.requests ? sum_svc / t.requests : 0;
    t.mean_queue_wait_s = waited ? sum_wait / waited : 0;
    t.p50_latency_s = all.Quantile(0.5);
    t.p99_latency_s = all.Quantile(0.99);
    return out;
  }

  const SimulatorConfig& c_;
  std::mt19937_64 rng_;
  ClusterModel cluster_;
  std::vector<double> factor_;
  std::vector<FnState> fns_;
  std::vector<Instance> inst_;
  std::vector<Event> heap_;
  uint64_t seq_ = 0;
  uint64_t events_ = 0;
  uint64_t in_system_ = 0;
};

}  // namespace

Result<SimulationReport> Simulator::Run(ArrivalSource& arrivals) {
  Engine engine(config_);
  return engine.Run(arrivals);
}

}  // namespace shoal
