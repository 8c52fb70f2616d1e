#include "shoal/control/autoscaler/learned_sizing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <utility>

namespace shoal {

namespace {

template <typename T>
size_t BinOf(T v, const std::vector<T>& edges) {
  size_t b = 0;
  while (b < edges.size() && v >= edges[b]) ++b;
  return b;
}

template <typename T>
std::string Range(const std::vector<T>& edges, size_t b) {
  if (edges.empty()) return "any";
  std::ostringstream o;
  if (b == 0)
    o << "<" << edges[0];
  else if (b == edges.size())
    o << ">=" << edges.back();
  else
    o << edges[b - 1] << "-" << edges[b];
  return o.str();
}

}  // namespace

void SizingFeatures::Observe(const FunctionSignals& s, double service_s, double time_scale,
                             double token_target) {
  const double n = static_cast<double>(s.arrivals);
  const double d2 = ticks_.empty() ? 0 : (n - last_) * (n - last_);
  const double tokens = static_cast<double>(s.tokens_in_flight);
  last_ = n;
  ticks_.push_back({s.now_s, n, d2, tokens});
  sum_ += n;
  sum_d2_ += d2;
  token_sum_ += tokens;
  token_target_ = token_target;
  while (!ticks_.empty() && (s.now_s - ticks_.front().t) / time_scale >= kWindowS) {
    sum_ -= ticks_.front().n;
    sum_d2_ -= ticks_.front().d2;
    token_sum_ -= ticks_.front().tokens;
    ticks_.pop_front();
  }
  span_s_ = ticks_.empty() ? 0
                           : (ticks_.back().t - ticks_.front().t) / time_scale +
                                 std::max(s.interval_s, 0.0) / time_scale;
  service_s_ = service_s / time_scale;
  concurrency_ = std::max<uint32_t>(1, s.concurrency);
}

double SizingFeatures::load() const {
  const double by_tokens = token_target_ > 0 && !ticks_.empty()
                               ? token_sum_ / static_cast<double>(ticks_.size()) / token_target_
                               : 0;
  if (!(span_s_ > 0)) return by_tokens;
  return std::max(sum_ / span_s_ * service_s_ / concurrency_, by_tokens);
}

double SizingFeatures::dispersion() const {
  const double k = static_cast<double>(ticks_.size());
  if (k < 3 || sum_ <= 0) return 1;
  const double mean = sum_ / k;
  // Half the mean squared difference of consecutive intervals (the Allan variance): a rate that
  // drifts over minutes (diurnal) stays near Poisson's 1, bursts within seconds do not.
  return std::max(0.0, sum_d2_) / (2 * (k - 1)) / mean;
}

SizingTable::SizingTable(std::vector<uint32_t> concurrency_edges)
    : load_edges_{0.01, 0.05, 0.2},
      dispersion_edges_{1.2, 3},
      concurrency_edges_(std::move(concurrency_edges)) {
  for (double h : {0.85, 1.0, 1.3}) {
    for (double hold : {2.0, 10.0, 30.0, 60.0}) {
      char name[40];
      std::snprintf(name, sizeof name, "x%.2f-hold-%gs", h, hold);
      actions_.push_back({h, hold, name});
    }
  }
  table_.assign(num_rows() * actions_.size(), Cell{});
}

size_t SizingTable::num_states() const {
  return (load_edges_.size() + 1) * (dispersion_edges_.size() + 1) *
         (concurrency_edges_.size() + 1);
}

size_t SizingTable::StateOf(double load, double dispersion, uint32_t concurrency) const {
  const size_t l = BinOf(load, load_edges_);
  const size_t d = BinOf(dispersion, dispersion_edges_);
  const size_t c = BinOf(concurrency, concurrency_edges_);
  return (l * (dispersion_edges_.size() + 1) + d) * (concurrency_edges_.size() + 1) + c;
}

size_t SizingTable::StateOf(const SizingFeatures& f) const {
  return StateOf(f.load(), f.dispersion(), f.concurrency());
}

size_t SizingTable::LoadRow(size_t state) const {
  return num_states() + state / ((dispersion_edges_.size() + 1) * (concurrency_edges_.size() + 1));
}

std::string SizingTable::DescribeState(size_t state) const {
  const size_t cs = concurrency_edges_.size() + 1, ds = dispersion_edges_.size() + 1;
  const size_t c = state % cs, d = (state / cs) % ds, l = state / cs / ds;
  std::string out =
      "load " + Range(load_edges_, l) + " instances, dispersion " + Range(dispersion_edges_, d);
  if (!concurrency_edges_.empty()) out += ", concurrency " + Range(concurrency_edges_, c);
  return out;
}

void SizingTable::Learn(const SizingSample& s) {
  if (s.state >= num_states() || s.action >= actions_.size()) return;
  for (size_t r : {s.state, LoadRow(s.state), GlobalRow()}) {
    Cell& c = table_[Row(r, s.action)];
    c.n += s.intervals;
    c.sum.instance_s += s.cost.instance_s;
    c.sum.cold_requests += s.cost.cold_requests;
    c.sum.slo_misses += s.cost.slo_misses;
  }
  samples_ += s.intervals;
}

size_t SizingTable::Choose(size_t state, const LearnedWeights& w, SizingCost* expected) const {
  auto mean = [](const Cell& c) {
    const double n = static_cast<double>(c.n);
    return SizingCost{c.sum.instance_s / n, c.sum.cold_requests / n, c.sum.slo_misses / n};
  };
  if (state < num_states()) {
    // Only the context's own row: a load-only row averaged over few functions was measured to
    // carry a choice to workloads it did not fit (x1.30 headroom on the diurnal bench at peak,
    // +49 % instance-seconds for nothing); an unseen context keeps the default sizing.
    for (size_t r : {state}) {
      // Conservative: the default action unless another one is measured clearly cheaper in
      // this row (an interval's outcome can stem from an earlier context's action, so small
      // differences are not trusted).
      const Cell& def = table_[Row(r, kDefaultAction)];
      if (def.n < kMinSamples) continue;
      const double def_cost = def.sum.Weighted(w) / static_cast<double>(def.n);
      size_t best = kDefaultAction;
      double best_cost = def_cost;
      for (size_t a = 0; a < actions_.size(); ++a) {
        const Cell& c = table_[Row(r, a)];
        if (c.n < kMinSamples) continue;
        const double cost = c.sum.Weighted(w) / static_cast<double>(c.n);
        if (cost < best_cost - 1e-12) {
          best_cost = cost;
          best = a;
        }
      }
      if (best_cost > (1 - kMargin) * def_cost) best = kDefaultAction;
      if (expected) *expected = mean(table_[Row(r, best)]);
      return best;
    }
  }
  if (expected) *expected = {};
  return kDefaultAction;
}

}  // namespace shoal
