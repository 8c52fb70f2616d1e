#include "shoal/control/autoscaler/learned_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "shoal/common/format_number.h"

namespace shoal {

namespace {

size_t BinOf(double v, const std::vector<double>& edges) {
  size_t b = 0;
  while (b < edges.size() && v >= edges[b]) ++b;
  return b;
}

std::string Secs(double v) {
  return v >= 60 && std::fmod(v, 60) == 0 ? FormatNumber("%gm", v / 60) : FormatNumber("%gs", v);
}

LearnedAction Keep(double seconds) {
  LearnedAction a;
  a.kind = LearnedAction::Kind::kKeep;
  a.seconds = seconds;
  a.name = "keep-" + Secs(seconds);
  return a;
}

LearnedAction KeepRelative(double q, double margin, std::string name) {
  LearnedAction a;
  a.kind = LearnedAction::Kind::kKeep;
  a.relative = true;
  a.hi_quantile = q;
  a.margin = margin;
  a.name = std::move(name);
  return a;
}

LearnedAction Prewarm(double lo, double hi, double margin, std::string name) {
  LearnedAction a;
  a.kind = LearnedAction::Kind::kPrewarm;
  a.relative = true;
  a.lo_quantile = lo;
  a.hi_quantile = hi;
  a.margin = margin;
  a.name = std::move(name);
  return a;
}

// The history quantiles the v1 actions name, in this order.
constexpr double kQuantiles[] = {0.05, 0.1, 0.5, 0.9, 1.0};

size_t QuantileIndex(double q) {
  for (size_t i = 0; i < std::size(kQuantiles); ++i)
    if (kQuantiles[i] == q) return i;
  return 0;
}

// Keep: hold until the window's end. Pre-warm: start so the instances are ready at lo.
struct Window {
  bool valid = false;
  double lo = 0, hi = 0;
};

Window Resolve(const LearnedAction& a, const std::vector<double>& q, bool has_history,
               size_t history, double interval_s) {
  Window w;
  if (!a.relative) {
    w.valid = true;
    w.hi = a.seconds;
    return w;
  }
  // A keep relative to the history needs one idle period; a pre-warm window needs three.
  if (!has_history || q.empty() || (a.kind == LearnedAction::Kind::kPrewarm && history < 3))
    return w;
  w.valid = true;
  w.hi = q[QuantileIndex(a.hi_quantile)] * (1 + a.margin) + interval_s;
  if (a.kind == LearnedAction::Kind::kPrewarm)
    w.lo = q[QuantileIndex(a.lo_quantile)] * (1 - a.margin);
  return w;
}

}  // namespace

double IdleHistory::Quantile(double q) const {
  if (idle_s.empty()) return 0;
  std::vector<double> v(idle_s.begin(), idle_s.end());
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const size_t j = std::min(v.size() - 1, i + 1);
  return v[i] + (v[j] - v[i]) * (pos - static_cast<double>(i));
}

// ---- LearnedModel ---------------------------------------------------------------------------

LearnedModel::LearnedModel()
    : median_edges_{15, 45, 90, 180, 420, 1200},
      spread_edges_{1.3, 2, 4},
      count_edges_{1, 3, 10},
      quantiles_(std::begin(kQuantiles), std::end(kQuantiles)) {
  for (double k : {0.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0}) actions_.push_back(Keep(k));
  actions_.push_back(KeepRelative(0.9, 0.15, "keep-q90+15%"));
  actions_.push_back(KeepRelative(1.0, 0.15, "keep-max+15%"));
  actions_.push_back(Prewarm(0.05, 1.0, 0.10, "prewarm-q05..max"));
  actions_.push_back(Prewarm(0.1, 0.9, 0.10, "prewarm-q10..q90"));
  actions_.push_back(Prewarm(0.5, 0.5, 0.10, "prewarm-median+-10%"));
  table_.assign(
      (num_states() + (count_edges_.size() + 1) * (spread_edges_.size() + 1) + 1) * actions_.size(),
      Cell{});
}

size_t LearnedModel::num_states() const {
  return (count_edges_.size() + 1) * (median_edges_.size() + 1) * (spread_edges_.size() + 1);
}

size_t LearnedModel::StateOf(const IdleHistory& h) const {
  size_t count = 0;
  while (count < count_edges_.size() && h.idle_s.size() >= count_edges_[count]) ++count;
  if (h.idle_s.empty()) return 0;
  const size_t median = BinOf(h.Quantile(0.5), median_edges_);
  const double q10 = std::max(1e-3, h.Quantile(0.1));
  const size_t spread = BinOf(h.Quantile(0.9) / q10, spread_edges_);
  return (count * (median_edges_.size() + 1) + median) * (spread_edges_.size() + 1) + spread;
}

size_t LearnedModel::CoarseOf(size_t state) const {
  const size_t spreads = spread_edges_.size() + 1;
  const size_t spread = state % spreads;
  const size_t count = state / spreads / (median_edges_.size() + 1);
  return num_states() + count * spreads + spread;
}

std::vector<double> LearnedModel::QuantilesOf(const IdleHistory& h) const {
  std::vector<double> q;
  for (double x : quantiles_) q.push_back(h.Quantile(x));
  return q;
}

std::string LearnedModel::DescribeState(size_t state) const {
  const size_t spreads = spread_edges_.size() + 1, medians = median_edges_.size() + 1;
  const size_t spread = state % spreads, median = (state / spreads) % medians,
               count = state / spreads / medians;
  auto range = [](const auto& edges, size_t b, const char* unit) {
    std::ostringstream o;
    if (b == 0)
      o << "<" << edges[0] << unit;
    else if (b == edges.size())
      o << ">=" << edges.back() << unit;
    else
      o << edges[b - 1] << "-" << edges[b] << unit;
    return o.str();
  };
  if (count == 0) return "no idle period seen";
  return "idle periods " + range(count_edges_, count, "") + ", median " +
         range(median_edges_, median, "s") + ", q90/q10 " + range(spread_edges_, spread, "");
}

ActionCost LearnedModel::Score(size_t a, const IdlePeriod& p) const {
  ActionCost c;
  const LearnedAction& act = actions_[a];
  const Window w = Resolve(act, p.quantiles, p.history > 0, p.history, p.interval_s);
  if (!w.valid) return c;
  c.valid = true;
  const double t = p.idle_s;
  const double cold = std::max(1.0, p.resume_arrivals);
  if (act.kind == LearnedAction::Kind::kKeep) {
    if (t <= w.hi) {
      c.instance_s = t;
    } else {
      c.instance_s = w.hi;
      c.cold_requests = cold;
    }
    return c;
  }
  // Pre-warm: started one cold start and one control interval before lo, ready at lo.
  const double held = std::max<uint32_t>(1, p.burst_peak);
  const double start = std::max(0.0, w.lo - p.cold_start_s - p.interval_s);
  const double ready = start + p.cold_start_s;
  if (t < start) {
    c.cold_requests = cold;
  } else if (t < ready) {
    c.cold_requests = cold;
    c.instance_s = held * (t - start);
  } else if (t <= w.hi) {
    c.instance_s = held * (t - start);
  } else {
    c.cold_requests = cold;
    c.instance_s = held * std::max(0.0, w.hi - start);
  }
  return c;
}

void LearnedModel::Learn(const IdlePeriod& p) {
  const size_t rows[] = {p.state, CoarseOf(p.state),
                         num_states() + (count_edges_.size() + 1) * (spread_edges_.size() + 1)};
  for (size_t a = 0; a < actions_.size(); ++a) {
    const ActionCost c = Score(a, p);
    if (!c.valid) continue;
    for (size_t r : rows) {
      Cell& cell = table_[Row(r, a)];
      ++cell.n;
      cell.cold += c.cold_requests;
      cell.inst += c.instance_s;
    }
  }
  ++total_samples_;
}

size_t LearnedModel::Choose(size_t state, const LearnedWeights& w, size_t fallback,
                            ActionCost* expected) const {
  const size_t global = num_states() + (count_edges_.size() + 1) * (spread_edges_.size() + 1);
  for (size_t r : {state, CoarseOf(state), global}) {
    size_t best = SIZE_MAX;
    double best_cost = std::numeric_limits<double>::infinity();
    for (size_t a = 0; a < actions_.size(); ++a) {
      const Cell& c = table_[Row(r, a)];
      if (c.n < min_samples) continue;
      const double n = static_cast<double>(c.n);
      const double cost = w.cost_weight * c.inst / n + w.cold_weight * c.cold / n;
      if (cost < best_cost - 1e-12) {
        best_cost = cost;
        best = a;
      }
    }
    if (best != SIZE_MAX) {
      if (expected) {
        const Cell& c = table_[Row(r, best)];
        *expected = {true, c.cold / static_cast<double>(c.n), c.inst / static_cast<double>(c.n)};
      }
      return best;
    }
  }
  if (expected) *expected = {};
  return fallback;
}

// ---- LearnedPolicy --------------------------------------------------------------------------

LearnedPolicy::LearnedPolicy(const LearnedParams& params, const ShoalParams& sizing,
                             std::shared_ptr<const LearnedModel> model)
    : p_(params), model_(std::move(model)), token_target_(sizing.token_target), sizing_([&] {
        ShoalParams s = sizing;
        s.histogram_keep_alive = false;
        return s;
      }()) {}

const LearnedAction* LearnedPolicy::current_action() const {
  return have_action_ ? &model_->actions()[action_] : nullptr;
}

std::string LearnedPolicy::Explain() const {
  std::string out;
  if (!have_sizing_) {
    out = "no interval yet";
  } else if (p_.sizing_action >= 0) {
    out = "sizing " + model_->sizing().actions()[sizing_action_].name + " (forced for training)";
  } else if (!model_->has_sizing()) {
    out = "sizing " + model_->sizing().actions()[sizing_action_].name +
          " (shoal's Erlang-C as is: the policy file is version " +
          std::to_string(model_->version()) + ", which has no sizing table)";
  } else {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "sizing %s (%s; load %.2f, dispersion %.1f; expects %.3f inst-s, %.4f cold, "
                  "%.4f slo misses per interval)",
                  model_->sizing().actions()[sizing_action_].name.c_str(),
                  model_->sizing().DescribeState(sizing_state_).c_str(), features_.load(),
                  features_.dispersion(), sizing_expected_.instance_s,
                  sizing_expected_.cold_requests, sizing_expected_.slo_misses);
    out = buf;
  }
  if (!have_action_) return out + "; no idle period yet";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s %s (window %.0f-%.0f s; %s; expects %.2f cold, "
                "%.0f inst-s)",
                idle_ ? "idle action" : "last idle action", model_->actions()[action_].name.c_str(),
                window_lo_, window_hi_, model_->DescribeState(pending_.state).c_str(),
                expected_.cold_requests, expected_.instance_s);
  return out + "; " + buf;
}

void LearnedPolicy::StartIdle(const FunctionSignals& s) {
  pending_ = {};
  pending_.state = model_->StateOf(history_);
  pending_.quantiles = model_->QuantilesOf(history_);
  pending_.history = static_cast<uint32_t>(history_.idle_s.size());
  pending_.cold_start_s =
      (s.cold_start_cost_s > 0 ? s.cold_start_cost_s : sizing_.cold_start_estimate()) /
      p_.time_scale;
  pending_.interval_s = last_interval_s_ / p_.time_scale;
  pending_.burst_peak = last_burst_peak_;
  for (const auto& [t, n] : arrivals_) {
    const double age = (s.now_s - t) / p_.time_scale;
    pending_.rate_10m += static_cast<double>(n);
    if (age < 60) pending_.rate_1m += static_cast<double>(n);
  }
  pending_.rate_1m /= 60;
  pending_.rate_10m /= 600;
  pending_.queue_wait_s = last_active_wait_s_;
  pending_.previous_idle_s = history_.idle_s.empty() ? 0 : history_.idle_s.back();
  pending_.concurrency = std::max<uint32_t>(1, s.concurrency);
  LearnedWeights w = p_.weights;
  if (s.slo_s > 0 && pending_.cold_start_s > s.slo_s) w.cold_weight += w.slo_weight;
  const size_t keep60 = 3;
  action_ = model_->Choose(pending_.state, w, keep60, &expected_);
  // A row can pick an action this function's history cannot resolve (a pre-warm with fewer
  // than three idle periods): keep for the platform's minute instead.
  const LearnedAction& a = model_->actions()[action_];
  const size_t n = history_.idle_s.size();
  if (a.relative && (n == 0 || (a.kind == LearnedAction::Kind::kPrewarm && n < 3)))
    action_ = keep60;
  const Window win =
      Resolve(model_->actions()[action_], pending_.quantiles, n > 0, n, pending_.interval_s);
  window_lo_ = win.lo * p_.time_scale;  // back to this clock's seconds
  window_hi_ = win.hi * p_.time_scale;
  have_action_ = true;
  idle_ = true;
}

void LearnedPolicy::EndIdle(const FunctionSignals& s, double real_idle_s) {
  const double idle_s = real_idle_s / p_.time_scale;
  pending_.idle_s = idle_s;
  pending_.resume_arrivals = static_cast<double>(std::max<uint64_t>(1, s.arrivals));
  if (recorder_) recorder_->push_back(pending_);
  if (p_.learn_online) {
    if (!own_) {
      own_ = std::make_shared<LearnedModel>(*model_);
      model_ = own_;
    }
    own_->Learn(pending_);
  }
  history_.idle_s.push_back(idle_s);
  while (history_.idle_s.size() > LearnedModel::kHistory) history_.idle_s.pop_front();
  idle_ = false;
}

ScalingDecision LearnedPolicy::Observe(const FunctionSignals& s) {
  // The interval that just ended ran under the sizing chosen at the previous tick: recorded with
  // it (training reads which contexts each function spent its intervals in).
  if (sizing_recorder_ && have_sizing_) {
    SizingSample x;
    x.state = sizing_state_;
    x.action = sizing_action_;
    x.cost.instance_s = (s.ready + s.starting) * std::max(0.0, s.interval_s) / p_.time_scale;
    x.cost.cold_requests = s.cold_requests;
    x.cost.slo_misses = s.slo_misses;
    sizing_recorder_->push_back(x);
  }
  features_.Observe(s, sizing_.service_estimate(), p_.time_scale, token_target_);
  const SizingTable& table = model_->sizing();
  sizing_state_ = table.StateOf(features_);
  if (p_.sizing_action >= 0) {
    sizing_action_ =
        std::min<size_t>(static_cast<size_t>(p_.sizing_action), table.actions().size() - 1);
    sizing_expected_ = {};
  } else if (model_->has_sizing()) {
    sizing_action_ = table.Choose(sizing_state_, p_.weights, &sizing_expected_);
  } else {
    sizing_action_ = SizingTable::kDefaultAction;
    sizing_expected_ = {};
  }
  have_sizing_ = true;
  SizingKnobs knobs;
  const SizingAction& act = table.actions()[sizing_action_];
  knobs.headroom = act.headroom;
  // A version-1 file keeps the manifest's scaleDownDelay (its sizing was shoal's as is).
  if (model_->has_sizing() || p_.sizing_action >= 0) {
    knobs.scale_down_delay_s = act.hold_s * p_.time_scale;
  }
  ScalingDecision d = sizing_.Observe(s, knobs);
  if (s.arrivals > 0 || s.inflight > 0 || s.queued > 0) {
    const double n = static_cast<double>(std::max<uint64_t>(s.completions, s.arrivals));
    active_wait_s_ += s.mean_queue_wait_s * n / p_.time_scale;
    active_dispatched_ += n;
  }
  if (s.interval_s > 0) last_interval_s_ = s.interval_s;
  if (s.arrivals > 0) arrivals_.emplace_back(s.now_s, s.arrivals);
  while (!arrivals_.empty() && (s.now_s - arrivals_.front().first) / p_.time_scale >= 600) {
    arrivals_.pop_front();
  }
  const double dt = last_interval_s_;
  const bool active = s.arrivals > 0 || s.inflight > 0 || s.queued > 0;
  if (active) {
    const bool new_period = !last_activity_s_ || s.now_s - *last_activity_s_ > dt + 1e-9;
    if (idle_ && last_activity_s_) EndIdle(s, s.now_s - *last_activity_s_);
    idle_ = false;
    if (new_period) burst_peak_ = 0;
    if (new_period) {
      const double n = static_cast<double>(std::max<uint64_t>(s.completions, s.arrivals));
      active_wait_s_ = s.mean_queue_wait_s * n / p_.time_scale;
      active_dispatched_ = n;
    }
    last_active_wait_s_ = active_dispatched_ > 0 ? active_wait_s_ / active_dispatched_ : 0;
    burst_peak_ = std::max(burst_peak_, d.replicas);
    last_burst_peak_ = std::max<uint32_t>(1, burst_peak_);
    last_activity_s_ = s.now_s;
    d.keep_alive_s = std::max(p_.excess_keep_alive_s, 1e-3);
    return d;
  }
  if (!last_activity_s_) return d;  // never called yet: the sizing (zero, or min scale)
  if (!idle_) StartIdle(s);
  const double idle = s.now_s - *last_activity_s_;
  const LearnedAction& a = model_->actions()[action_];
  // Instances above the decided size go at the next tick: the action alone decides what stays.
  d.keep_alive_s = std::max(1.0, dt);
  d.prewarm = 0;
  if (a.kind == LearnedAction::Kind::kKeep) {
    d.replicas = idle < window_hi_ ? std::max<uint32_t>(1, d.replicas) : 0;
  } else {
    d.replicas = 0;
    const double start = std::max(0.0, window_lo_ - pending_.cold_start_s * p_.time_scale - dt);
    if (idle + dt >= start && idle < window_hi_) d.prewarm = last_burst_peak_;
  }
  d.replicas = ClampScale(d.replicas, s);
  const uint32_t capped = ClampScale(uint64_t{d.replicas} + d.prewarm, s);
  d.prewarm = capped > d.replicas ? capped - d.replicas : 0;
  return d;
}

}  // namespace shoal
