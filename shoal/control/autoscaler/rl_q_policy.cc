#include "shoal/control/autoscaler/rl_q_policy.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace shoal {
namespace {

// splitmix64: a tiny generator whose output is the same on every platform and library (the
// standard distributions are not), so a seed reproduces a run exactly.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

RlQPolicy::RlQPolicy(const RlQParams& params)
    : p_(params),
      load_bins_(params.load_bin_edges.size() + 1),
      q_(load_bins_ * params.targets.size() * kActions, 0.0),
      rng_state_(params.seed),
      epsilon_(params.epsilon),
      target_index_(params.initial_target_index),
      kpa_(params.kpa) {}

double RlQPolicy::Uniform01() {
  return static_cast<double>(SplitMix64(rng_state_) >> 11) * 0x1.0p-53;
}

size_t RlQPolicy::LoadBin(double load) const {
  const auto& e = p_.load_bin_edges;
  return static_cast<size_t>(std::lower_bound(e.begin(), e.end(), load) - e.begin());
}

size_t RlQPolicy::StateIndex(size_t load_bin, size_t target_index) const {
  return load_bin * p_.targets.size() + target_index;
}

double RlQPolicy::Update(size_t state, int action, double reward, size_t next_state) {
  double best_next = q(next_state, 0);
  for (int a = 1; a < kActions; ++a) best_next = std::max(best_next, q(next_state, a));
  double& cell = q_[state * kActions + action];
  cell += p_.alpha * (reward + p_.gamma * best_next - cell);
  return cell;
}

int RlQPolicy::GreedyAction(size_t state) const {
  int best = kKeep;
  for (int a : {kLower, kRaise})
    if (q(state, a) > q(state, best)) best = a;
  return best;
}

int RlQPolicy::ChooseAction(size_t state) {
  const bool explore = Uniform01() < epsilon_;
  int action = GreedyAction(state);
  if (explore) action = static_cast<int>(SplitMix64(rng_state_) % kActions);
  epsilon_ = std::max(p_.epsilon_min, epsilon_ * p_.epsilon_decay);
  return action;
}

double RlQPolicy::Reward(const IntervalStats& st) const {
  const double served =
      st.arrivals > 0
          ? std::min(1.0, static_cast<double>(st.completions) / static_cast<double>(st.arrivals))
          : 1.0;
  const double slo = st.slo_s > 0 ? st.slo_s : p_.default_slo_s;
  const double latency_factor = st.worst_p99_s > slo ? slo / st.worst_p99_s : 1.0;
  const double mean_instances = st.elapsed_s > 0 ? st.instance_seconds / st.elapsed_s : 0.0;
  return served * latency_factor - p_.cold_start_penalty * static_cast<double>(st.cold_starts) -
         p_.instance_cost * mean_instances;
}

Status RlQPolicy::LoadQTable(const std::vector<double>& table) {
  if (table.size() != q_.size())
    return InvalidArgument("rl_q: Q-table has " + std::to_string(table.size()) +
                           " entries, this configuration needs " + std::to_string(q_.size()));
  for (double v : table)
    if (!std::isfinite(v)) return InvalidArgument("rl_q: Q-table holds a non-finite value");
  q_ = table;
  return Status::Ok();
}

ScalingDecision RlQPolicy::Observe(const FunctionSignals& s) {
  const double observed = static_cast<double>(s.inflight) + static_cast<double>(s.queued);
  if (!started_) {
    started_ = true;
    interval_start_s_ = s.now_s;
  } else {
    const double dt = s.interval_s > 0 ? s.interval_s : 0;
    stats_.elapsed_s += dt;
    stats_.arrivals += s.arrivals;
    stats_.completions += s.completions;
    stats_.cold_starts += s.cold_starts;
    stats_.worst_p99_s = std::max(stats_.worst_p99_s, s.p99_latency_s);
    stats_.instance_seconds += static_cast<double>(s.ready + s.starting) * dt;
    stats_.concurrency_seconds += observed * dt;
    stats_.slo_s = s.slo_s;
  }

  const bool decide =
      stats_.elapsed_s > 0 &&
      (p_.decision_interval_s <= 0 || s.now_s - interval_start_s_ >= p_.decision_interval_s - 1e-9);
  if (decide) {
    const double load = stats_.concurrency_seconds / stats_.elapsed_s;
    const size_t state = StateIndex(LoadBin(load), target_index_);
    if (have_pending_) Update(pending_state_, pending_action_, Reward(stats_), state);
    const int action = ChooseAction(state);
    if (action == kLower && target_index_ > 0) --target_index_;
    if (action == kRaise && target_index_ + 1 < p_.targets.size()) ++target_index_;
    have_pending_ = true;
    pending_state_ = state;
    pending_action_ = action;
    ++decisions_;
    stats_ = IntervalStats{};
    interval_start_s_ = s.now_s;
  }

  kpa_.set_target_override(p_.targets[target_index_]);
  ScalingDecision d = kpa_.Observe(s);
  return d;
}

}  // namespace shoal
